# SPDX-License-Identifier: Apache-2.0
"""The counted checks the KV service's Python test scripts share: check()
and raises() count a pass or print the failure, run() counts a part that
crashed as one failure, summary() prints "N passed, M failed" and
returns the exit status."""

passed = 0
failed = 0
prefix = ""  # a script's own, before every check's name: "kv_cluster_py_"


def check(name, got, want):
    """Counts a check: `got` must equal `want`."""
    global passed, failed
    if got == want:
        passed += 1
    else:
        failed += 1
        print(f"FAIL: {prefix}{name}: got {got!r}, want {want!r}")


def raises(name, fn, exc, text):
    """Counts a check: fn() must raise `exc` with `text` in its message."""
    global passed, failed
    try:
        got = fn()
    except exc as e:
        if text in str(e):
            passed += 1
        else:
            failed += 1
            print(f"FAIL: {prefix}{name}: raised {e!r}, want {text!r} in it")
        return
    failed += 1
    print(f"FAIL: {prefix}{name}: returned {got!r}, want {exc.__name__}")


def run(part, *args):
    """Runs part(*args); an exception counts as one failure, and the
    script goes on with the next part."""
    global failed
    try:
        part(*args)
    except Exception as e:  # noqa: BLE001: any crash is a failed part
        failed += 1
        print(f"FAIL: {part.__name__} raised {e!r}")


def summary():
    """Prints the counts; returns 1 on any failure, else 0."""
    print(f"{passed} passed, {failed} failed")
    return 1 if failed else 0
