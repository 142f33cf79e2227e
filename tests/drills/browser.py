"""Headless Chromium (Debian's ``chromium``) on the Airflow UI: screenshots and the rendered DOM.

The UI is a single-page app that logs in by itself when every user is an admin (the simple auth
manager's ``simple_auth_manager_all_admins``): Chromium follows the login redirect and renders the page
within ``--virtual-time-budget``.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
from pathlib import Path

#: Virtual milliseconds the page gets to load its data and render.
VIRTUAL_TIME_MS = 15000
#: Wall-clock seconds one Chromium run may take.
CHROMIUM_TIMEOUT_SECS = 120


class BrowserError(RuntimeError):
    """Chromium is missing or did not render the page."""


def chromium_binary() -> str:
    """Debian's chromium; scripts/bootstrap.sh installs it."""
    for name in ("chromium", "chromium-browser"):
        found = shutil.which(name)
        if found:
            return found
    raise BrowserError("chromium is not installed: run scripts/bootstrap.sh (it installs Debian's chromium package)")


def _chromium(profile: Path, *args: str) -> subprocess.CompletedProcess:
    command = [
        chromium_binary(),
        "--headless",
        "--no-sandbox",  # tests run as root in CI
        "--disable-gpu",
        "--disable-dev-shm-usage",
        "--no-first-run",
        "--hide-scrollbars",
        f"--user-data-dir={profile}",
        f"--virtual-time-budget={VIRTUAL_TIME_MS}",
        *args,
    ]
    process = subprocess.Popen(
        command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True
    )
    try:
        out, err = process.communicate(timeout=CHROMIUM_TIMEOUT_SECS)
    except subprocess.TimeoutExpired:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGKILL)
        process.communicate()
        raise BrowserError(f"chromium did not finish within {CHROMIUM_TIMEOUT_SECS} s: {' '.join(args)}") from None
    with contextlib.suppress(ProcessLookupError):
        os.killpg(process.pid, signal.SIGKILL)  # helpers it may have left behind
    return subprocess.CompletedProcess(command, process.returncode, out, err)


def screenshot(url: str, target: Path, profile: Path, size: tuple[int, int] = (1400, 900)) -> Path:
    """Render ``url`` and save a PNG of the window."""
    target.parent.mkdir(parents=True, exist_ok=True)
    done = _chromium(profile, f"--window-size={size[0]},{size[1]}", f"--screenshot={target}", url)
    if done.returncode != 0 or not target.exists():
        raise BrowserError(f"chromium could not take a screenshot of {url}: {done.stderr[-2000:]}")
    return target


def dom(url: str, profile: Path, size: tuple[int, int] = (1400, 900)) -> str:
    """Render ``url`` and return the DOM as HTML."""
    done = _chromium(profile, f"--window-size={size[0]},{size[1]}", "--dump-dom", url)
    if done.returncode != 0 or "<html" not in done.stdout:
        raise BrowserError(f"chromium could not render {url}: {done.stderr[-2000:]}")
    return done.stdout
