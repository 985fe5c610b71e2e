# Sourced by the scripts: makes the checkout's .venv and installs into it
# what the calling script needs, saying what and showing pip's progress.
#   install_for serve   the broker and its dependencies, nothing else
#   install_for test    the same with the test extra (the tests' clients,
#                       pytest, the audit's Spark), upgrading serve's venv
#                       in place, and kombu's and py-amqp's source archives
# Re-runs install nothing until pyproject.toml changes.  Messages go to
# stderr: the broker's standard output stays its own.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
venv="$root/.venv"
python="${PYTHON:-python3}"
me="$(basename "$0")"

say() {
    echo "$me: $*" >&2
}

# The names of what the base install ("") or an extra requires directly,
# with this project's own extras spelt out.
requirements() {
    "$venv/bin/python" - "$root/pyproject.toml" "$1" <<'EOF'
import re, sys, tomllib
with open(sys.argv[1], "rb") as handle:
    project = tomllib.load(handle)["project"]

def names(extra):
    wanted = project["optional-dependencies"][extra] if extra else project["dependencies"]
    for requirement in wanted:
        name, extras = re.match(r"([A-Za-z0-9_.-]+)(?:\[(.*)\])?", requirement).groups()
        if name != project["name"]:
            yield name
            continue
        for own in filter(None, map(str.strip, (extras or "").split(","))):
            yield f"the {own} extra ({', '.join(names(own))})"

print(", ".join(names(sys.argv[2])))
EOF
}

install_for() {
    local what="$1" key started target
    key="$(sha256sum "$root/pyproject.toml" | cut -c1-16)"
    # The test install holds the broker's: either stamp will do for serve.
    if [ -f "$venv/.installed-test-$key" ] \
        || { [ "$what" = serve ] && [ -f "$venv/.installed-serve-$key" ]; }; then
        return 0
    fi
    started=$SECONDS
    if [ ! -x "$venv/bin/python" ]; then
        if ! "$python" -c 'import sys; sys.exit(sys.version_info < (3, 11))' 2>/dev/null; then
            say "needs Python 3.11 or newer; $python is $("$python" --version 2>&1 || echo missing)" \
                "(PYTHON=python3.12 $0 picks another)"
            exit 1
        fi
        say "creating $venv with $("$python" --version 2>&1)"
        "$python" -m venv "$venv"
    fi
    if [ "$what" = serve ]; then
        say "installing the broker and its dependencies: $(requirements "")" \
            "(about 230 MB, once)"
        target="$root"
    else
        say "installing the broker with the test extra: $(requirements test)" \
            "(about 1.1 GB, a few minutes the first time)"
        target="$root[test]"
    fi
    # pip's own output, progress bars included, on stderr too.
    if ! "$venv/bin/python" -m pip install --disable-pip-version-check -e "$target" >&2; then
        say "pip could not install $target (its message is above)"
        exit 1
    fi
    if [ "$what" = test ]; then
        # kombu's and py-amqp's own integration suites
        # (interop/test_client_suites.py) come in their release archives:
        # those of the installed versions.
        say "downloading kombu's and py-amqp's source archives (their test suites run" \
            "against the broker)"
        rm -rf "$venv/client-suites"
        "$venv/bin/python" -m pip download --quiet --disable-pip-version-check --no-deps \
            --no-binary :all: -d "$venv/client-suites" \
            $("$venv/bin/python" -c 'from importlib.metadata import version
print(*(name + "==" + version(name) for name in ("kombu", "amqp")))') \
            || say "could not download the kombu and amqp release archives"
    fi
    rm -f "$venv"/.installed-*
    touch "$venv/.installed-$what-$key"
    say "$venv ready in $((SECONDS - started)) s; later runs install nothing until" \
        "pyproject.toml changes"
}
