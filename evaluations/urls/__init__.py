"""URL maps of the evaluations pages, one module per mount point (``governor/urls.py`` mounts them)."""
