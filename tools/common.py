"""What the tools in this folder share: the project's Python environment, their messages, the
bertpre binary, and paths as a user types them back.

need(): tools/setup.sh installs the Python packages the tools need (transformers,
tensorboard, ...) into the virtual environment .venv at the repository root. A tool run as
`tools/NAME.py` starts with the first python3 on the PATH (Debian's, say); need() checks that
the packages it names can be imported and, when they cannot, runs the tool again with
.venv/bin/python (once: the environment variable BERTPRE_TOOL_REEXEC marks the second start).
Without .venv, or when .venv lacks them too, the tool stops with an error naming the
packages, the Python tried and the environment that tools/setup.sh makes.

The standard library only: a tool imports this module before need() has found its packages.
"""
import importlib.util
import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
VENV = os.path.join(ROOT, ".venv")
VENV_PYTHON = os.path.join(VENV, "bin", "python")


def need(tool, *modules):
    """Returns when every module imports here; else re-runs the tool with .venv's Python or exits 1."""
    missing = [m for m in modules if importlib.util.find_spec(m) is None]
    if not missing:
        return
    in_venv = os.path.realpath(sys.prefix) == os.path.realpath(VENV)
    if not in_venv and os.access(VENV_PYTHON, os.X_OK) and not os.environ.get("BERTPRE_TOOL_REEXEC"):
        os.environ["BERTPRE_TOOL_REEXEC"] = "1"
        sys.stdout.flush()
        os.execv(VENV_PYTHON, [VENV_PYTHON, os.path.abspath(sys.argv[0]), *sys.argv[1:]])
    where = (f"{sys.executable} (the project's environment {VENV})" if in_venv or os.environ.get("BERTPRE_TOOL_REEXEC")
             else f"{sys.executable}, and there is no {VENV_PYTHON}")
    print(f"{tool}: error: needs the Python package(s) {', '.join(missing)}, missing from {where}: "
          f"run tools/setup.sh, which installs them into {VENV}", file=sys.stderr)
    sys.exit(1)


class Messages:
    """A tool's lines: `NAME: text` on stdout, warnings and errors on stderr; fail() exits 1."""

    def __init__(self, name):
        self.name = name

    def say(self, text):
        print(f"{self.name}: {text}", flush=True)

    def warn(self, text):
        sys.stdout.flush()
        print(f"{self.name}: warning: {text}", file=sys.stderr, flush=True)

    def fail(self, text, status=1):
        sys.stdout.flush()
        print(f"{self.name}: error: {text}", file=sys.stderr, flush=True)
        sys.exit(status)


def bertpre_binary(messages):
    """The bertpre binary: $BERTPRE, else build/bertpre; exits naming how to build it."""
    path = os.environ.get("BERTPRE") or os.path.join(ROOT, "build", "bertpre")
    if not os.access(path, os.X_OK):
        messages.fail(f"{path} is not built (run tools/setup.sh, then tools/build.sh; or set BERTPRE)")
    return os.path.abspath(path)


def shown(path, base=None):
    """A path as a command takes it from where the user started the tool (base, else $PRETRAIN_FROM,
    else the current directory): relative below it, else absolute."""
    base = base or os.environ.get("PRETRAIN_FROM") or os.getcwd()
    rel = os.path.relpath(os.path.abspath(path), base)
    return rel if not rel.startswith("..") else os.path.abspath(path)


def program(path):
    """A program's path as a shell runs it: with a slash (a bare name would be looked up on the PATH)."""
    p = shown(path)
    return p if "/" in p else "./" + p
