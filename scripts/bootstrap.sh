#!/usr/bin/env bash
# Create .venv with everything airflow-tfos needs (Python packages pinned in
# requirements/constraints.txt, Debian's libkrb5-dev for the HDFS provider's Kerberos
# client). Safe to run again: it only installs what changed.
set -euo pipefail
cd "$(dirname "$0")/.."

PYTHON="${PYTHON:-python3.11}"
VENV="${VENV:-.venv}"

fail() { echo "bootstrap: $*" >&2; exit 1; }

command -v "$PYTHON" >/dev/null 2>&1 || PYTHON=python3
"$PYTHON" -c 'import sys; sys.exit(0 if sys.version_info[:2] == (3, 11) else 1)' 2>/dev/null \
  || fail "Python 3.11 is required (found: $("$PYTHON" --version 2>&1 || echo none)). Install python3.11 or set PYTHON=/path/to/python3.11"

if ! command -v java >/dev/null 2>&1; then
  fail "Java 17 is required by Spark and was not found. Install it (Debian/Ubuntu: apt-get install -y openjdk-17-jre-headless) or put it on PATH / set JAVA_HOME"
fi
java_major="$(java -version 2>&1 | sed -n 's/.* version "\([0-9]*\).*/\1/p' | head -1)"
if [ -z "$java_major" ] || [ "$java_major" -lt 17 ]; then
  fail "Java 17 or newer is required by Spark 4; 'java -version' says: $(java -version 2>&1 | head -1). Install openjdk-17-jre-headless or point JAVA_HOME/PATH at a Java 17"
fi

if ! dpkg -s libkrb5-dev >/dev/null 2>&1 && command -v apt-get >/dev/null 2>&1; then
  echo "bootstrap: installing Debian package libkrb5-dev (needed to build gssapi for the HDFS provider)"
  SUDO=""
  [ "$(id -u)" -eq 0 ] || SUDO="sudo"
  $SUDO apt-get update -qq || fail "apt-get update failed; install libkrb5-dev by hand"
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq libkrb5-dev >/dev/null \
    || fail "could not install libkrb5-dev; install it by hand (apt-get install -y libkrb5-dev)"
fi

# Headless Chromium takes the failure drills' screenshots of the Airflow UI (tests/drills). Without it
# only that test fails, so a failed install is a warning here.
if ! command -v chromium >/dev/null 2>&1 && command -v apt-get >/dev/null 2>&1; then
  echo "bootstrap: installing Debian package chromium (headless screenshots of the Airflow UI in the drills)"
  SUDO=""
  [ "$(id -u)" -eq 0 ] || SUDO="sudo"
  { $SUDO apt-get update -qq \
      && DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq chromium fonts-liberation >/dev/null; } \
    || echo "bootstrap: warning: could not install chromium (apt-get install -y chromium); the drills' screenshot test will fail" >&2
fi

# The Kerberos tests run a real MIT KDC (tests/conftest.py's kdc fixture installs krb5-kdc, krb5-admin-server
# and krb5-user itself when they are missing); faketime runs a client with its clock off for the clock-skew test.
if ! command -v faketime >/dev/null 2>&1 && command -v apt-get >/dev/null 2>&1; then
  echo "bootstrap: installing Debian package faketime (the Kerberos clock-skew test)"
  SUDO=""
  [ "$(id -u)" -eq 0 ] || SUDO="sudo"
  { $SUDO apt-get update -qq \
      && DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq faketime >/dev/null; } \
    || echo "bootstrap: warning: could not install faketime; the Kerberos clock-skew test is skipped" >&2
fi

stamp="$VENV/.airflow-tfos-installed"
want="$(cat pyproject.toml requirements/constraints.txt | sha256sum | cut -d' ' -f1)"
if [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$want" ]; then
  exit 0
fi
[ -x "$VENV/bin/python" ] || "$PYTHON" -m venv "$VENV"
echo "bootstrap: installing Python packages into $VENV (a few minutes the first time)"
"$VENV/bin/python" -m pip install -q --upgrade "pip>=24" "setuptools<70" wheel
"$VENV/bin/python" -m pip install -q -c requirements/constraints.txt -e ".[runtime,tensorboard,demo,test]"
echo "$want" > "$stamp"
echo "bootstrap: ready ($VENV)"
