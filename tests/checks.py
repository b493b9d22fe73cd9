"""Shared by the Python tests that check bertpre's output: one ok/FAIL line per check, with
the detail (the program's output) printed under a failure, and the failure count that sets
the exit status (checks.exit_status())."""

failures = 0


def expect(what, ok, detail=""):
    global failures
    failures += not ok
    print(f"{'ok  ' if ok else 'FAIL'} {what}")
    if not ok and detail:
        print("     " + str(detail).strip().replace("\n", "\n     "))


def exit_status():
    return 1 if failures else 0
