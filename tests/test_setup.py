"""tools/setup.sh and the package lock: while another apt or dpkg holds it (an unattended
upgrade, a second terminal), setup waits and says so instead of failing at once.

setup.sh runs from a copy of the tools folder in a scratch root whose virtual environments are
stubs already up to date (their requirement stamps equal the files), with `dpkg-query` and
`apt-get` (and `sudo`) on PATH replaced by scripts: dpkg-query reports every package missing;
apt-get records each call and answers as apt 2.6 does when the lock is held ("E: Could not get
lock /var/lib/dpkg/lock-frontend. It is held by process 4242 (apt-get)", exit 100) for the
first calls the case asks, then succeeds. Cases:
  - the lock held for 2 `update` calls and 1 `install` call: exit 0; a line saying it waits
    for the package lock and naming the holder; apt-get called update 3 times, install twice,
    with every missing package;
  - the lock never freed, SETUP_APT_WAIT_SECONDS 2: exit 1 with an error naming the lock and
    its holder and what to do; install never called;
  - another apt failure ("E: Unable to locate package"): exit 1 at once with apt's message,
    no wait line, update called once.
The poll interval is 1 s here (SETUP_APT_POLL_SECONDS): the cases take a few seconds.

usage: test_setup.py SOURCE_ROOT
"""
import os
import shutil
import stat
import subprocess
import sys
import tempfile

import checks
from checks import expect

source = os.path.abspath(sys.argv[1])

APT = """#!/bin/sh
# apt-get stand-in: records the call; the first $LOCKED_<verb> calls of a verb meet a held lock.
verb=$1
echo "$verb $*" >> "$CALLS"
n=$(grep -c "^$verb " "$CALLS")
limit=$(eval echo \\${LOCKED_$verb:-0})
if [ -n "$OTHER_ERROR" ]; then
  echo "E: Unable to locate package no-such-package" >&2
  exit 100
fi
if [ "$n" -le "$limit" ]; then
  echo "E: Could not get lock /var/lib/dpkg/lock-frontend. It is held by process 4242 (apt-get)" >&2
  echo "N: Be aware that removing the lock file is not a solution and may break your system." >&2
  exit 100
fi
exit 0
"""
DPKG_QUERY = "#!/bin/sh\nexit 1\n"  # every package: not installed
SUDO = '#!/bin/sh\nexec "$@"\n'


def script(path, text):
    with open(path, "w") as f:
        f.write(text)
    os.chmod(path, os.stat(path).st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)


def scratch(tmp):
    """A root holding a copy of tools/ and up-to-date stub environments; returns (root, bin)."""
    root = os.path.join(tmp, "root")
    shutil.copytree(os.path.join(source, "tools"), os.path.join(root, "tools"),
                    ignore=shutil.ignore_patterns("__pycache__"))
    for env, stamps in ((".venv", ("requirements.txt", "requirements-nodeps.txt")),
                        (".venv-hf5", ("requirements-hf5.txt",))):
        os.makedirs(os.path.join(root, env, "bin"))
        script(os.path.join(root, env, "bin", "python"), "#!/bin/sh\nexit 0\n")
        for name in stamps:
            stamp = ".requirements" + ("-nodeps" if "nodeps" in name else "")
            shutil.copy(os.path.join(root, "tools", name), os.path.join(root, env, stamp))
    fake = os.path.join(tmp, "bin")
    os.makedirs(fake)
    script(os.path.join(fake, "apt-get"), APT)
    script(os.path.join(fake, "dpkg-query"), DPKG_QUERY)
    script(os.path.join(fake, "sudo"), SUDO)
    return root, fake


def setup(tmp, **env):
    root, fake = scratch(tmp)
    calls = os.path.join(tmp, "calls")
    open(calls, "w").close()
    run_env = dict(os.environ, PATH=fake + os.pathsep + os.environ["PATH"], CALLS=calls, SETUP_APT_POLL_SECONDS="1",
                   **{k: str(v) for k, v in env.items()})
    p = subprocess.run(["bash", os.path.join(root, "tools", "setup.sh")], capture_output=True, text=True,
                       env=run_env, timeout=120)
    with open(calls) as f:
        made = [line.split()[0] for line in f]
    return p, made


with tempfile.TemporaryDirectory() as tmp:
    p, calls = setup(os.path.join(tmp, "a"), LOCKED_update=2, LOCKED_install=1)
    out = p.stdout + p.stderr
    expect("the lock held for 2 update calls and 1 install call: exit 0, waiting said with the holder "
           "(process 4242 (apt-get)), update called 3 times, install twice",
           p.returncode == 0 and "setup: waiting for the package lock" in p.stdout and
           "held by process 4242 (apt-get)" in p.stdout and calls.count("update") == 3 and
           calls.count("install") == 2, f"{calls}\n{out}")

    p, calls = setup(os.path.join(tmp, "b"), LOCKED_update=1000, SETUP_APT_WAIT_SECONDS=2)
    expect("the lock never freed (SETUP_APT_WAIT_SECONDS 2): exit 1, an error naming the lock, its holder and what "
           "to do; install never called",
           p.returncode == 1 and "setup: error: the package lock is still held after" in p.stderr and
           "/var/lib/dpkg/lock-frontend" in p.stderr and "process 4242" in p.stderr and
           "run tools/setup.sh again" in p.stderr and "install" not in calls, f"{calls}\n{p.stdout}{p.stderr}")

    p, calls = setup(os.path.join(tmp, "c"), OTHER_ERROR=1)
    expect("another apt failure: exit 1 at once with apt's message, no waiting, update called once",
           p.returncode == 1 and "Unable to locate package" in p.stderr and "waiting" not in p.stdout and
           calls == ["update"], f"{calls}\n{p.stdout}{p.stderr}")
sys.exit(checks.exit_status())
