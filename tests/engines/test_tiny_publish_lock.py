"""Two processes asking for the same trained or quantized checkpoint at once build it only once.

Test workers on a fresh clone race for the tiny model's trained copy (minutes of CPU); the lock file
beside the checkpoint makes the second wait and then use what the first published.
"""

from __future__ import annotations

import threading

from engines import tiny_train
from engines.tiny_model import ensure_tiny_model


def test_concurrent_requests_for_one_quantized_copy_build_it_once(tmp_path, monkeypatch):
    src = ensure_tiny_model(tmp_path / "tiny", seed=5)
    builds: list[int] = []
    entering: list[int] = []
    second_at_the_lock = threading.Event()
    real_lock, real_quantize = tiny_train._publishing_lock, tiny_train._quantize

    class WatchedLock:
        def __init__(self, path):
            self.lock = real_lock(path)

        def __enter__(self):
            entering.append(threading.get_ident())
            if len(entering) == 2:
                second_at_the_lock.set()
            return self.lock.__enter__()

        def __exit__(self, *exc):
            return self.lock.__exit__(*exc)

    def slow_quantize(*args, **kwargs):
        builds.append(threading.get_ident())
        if len(builds) == 1:  # hold the lock until the second caller is trying to take it
            assert second_at_the_lock.wait(60), "the second caller never reached the lock"
        return real_quantize(*args, **kwargs)

    monkeypatch.setattr(tiny_train, "_publishing_lock", WatchedLock)
    monkeypatch.setattr(tiny_train, "_quantize", slow_quantize)
    results: list = []

    def ask():
        results.append(tiny_train.ensure_quantized_model(src, bits=4, group_size=64))

    callers = [threading.Thread(target=ask) for _ in range(2)]
    callers[0].start()
    while not builds and callers[0].is_alive():  # the first caller holds the lock and is building
        callers[0].join(0.01)
    callers[1].start()
    for caller in callers:
        caller.join(120)
    assert len(entering) == 2  # both went for the lock ...
    assert len(builds) == 1  # ... and only the one that got it first built the copy
    assert len(results) == 2 and results[0] == results[1]
    assert (results[0] / "governor_quantized.json").is_file()
    assert [p.name for p in tmp_path.iterdir() if ".tmp-" in p.name] == []  # nothing half-built left
