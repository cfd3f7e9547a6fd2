"""Template context shared by every page: the viewer's roles, for navigation and action buttons."""

from core.access import is_auditor, is_platform_admin, reads_everything


def roles(request) -> dict:
    user = getattr(request, "user", None)
    return {
        "is_platform_admin": is_platform_admin(user),
        "is_auditor": is_auditor(user),
        "reads_everything": reads_everything(user),
    }
