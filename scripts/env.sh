# Sourced by the scripts: make .venv with everything the project needs.
# Re-runs are cheap: pip only installs when pyproject.toml changed.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
venv="$root/.venv"
python="${PYTHON:-python3}"
if [ ! -x "$venv/bin/python" ]; then
    "$python" -m venv "$venv"
fi
stamp="$venv/.installed-$(sha256sum "$root/pyproject.toml" | cut -c1-16)"
if [ ! -f "$stamp" ]; then
    "$venv/bin/python" -m pip install --quiet --upgrade pip >/dev/null
    "$venv/bin/python" -m pip install --quiet -e "$root[test]"
    # kombu's and py-amqp's own integration suites (interop/test_client_suites.py)
    # come in their release archives: those of the installed versions.
    rm -rf "$venv/client-suites"
    "$venv/bin/python" -m pip download --quiet --no-deps --no-binary :all: \
        -d "$venv/client-suites" $("$venv/bin/python" -c 'from importlib.metadata import version
print(*(name + "==" + version(name) for name in ("kombu", "amqp")))') \
        || echo "could not download the kombu and amqp release archives" >&2
    rm -f "$venv"/.installed-*
    touch "$stamp"
fi
