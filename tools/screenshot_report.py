"""Render a conformance report's index.html with headless Chromium and save a PNG.

    python tools/screenshot_report.py REPORT_DIR/index.html OUT.png [--width 1400] [--height 2400]

Chromium is looked up as /usr/bin/chromium, then chromium, chromium-browser and
google-chrome on PATH (or $CHROMIUM). Exit status: 0 when the PNG was written, 3 when no
Chromium is installed (the message says so), 1 when Chromium failed.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

CANDIDATES = ("/usr/bin/chromium", "chromium", "chromium-browser", "google-chrome")
NO_BROWSER = 3


def find_chromium() -> str | None:
    """The Chromium executable to use, or None when none is installed."""
    wanted = os.environ.get("CHROMIUM")
    for name in (wanted, *CANDIDATES) if wanted else CANDIDATES:
        path = name if name and os.path.isabs(name) and os.access(name, os.X_OK) else shutil.which(name or "")
        if path:
            return path
    return None


def screenshot(html: Path, png: Path, width: int = 1400, height: int = 2400, timeout_s: float = 60.0) -> None:
    """Write ``png``; raises FileNotFoundError without Chromium, RuntimeError when it fails."""
    browser = find_chromium()
    if browser is None:
        raise FileNotFoundError(
            "no Chromium found (/usr/bin/chromium, chromium, chromium-browser, google-chrome)"
        )
    with tempfile.TemporaryDirectory() as profile:
        cmd = [
            browser,
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--hide-scrollbars",
            f"--user-data-dir={profile}",
            f"--window-size={width},{height}",
            f"--screenshot={png.resolve()}",
            html.resolve().as_uri(),
        ]
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout_s)
    if done.returncode != 0 or not png.exists():
        raise RuntimeError(f"chromium failed ({done.returncode}): {done.stderr.strip()[-500:]}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("html", type=Path)
    parser.add_argument("png", type=Path)
    parser.add_argument("--width", type=int, default=1400)
    parser.add_argument("--height", type=int, default=2400)
    args = parser.parse_args(argv)
    try:
        screenshot(args.html, args.png, args.width, args.height)
    except FileNotFoundError as exc:
        print(f"screenshot_report: {exc}", file=sys.stderr)
        return NO_BROWSER
    except (RuntimeError, subprocess.TimeoutExpired) as exc:
        print(f"screenshot_report: {exc}", file=sys.stderr)
        return 1
    print(f"screenshot_report: wrote {args.png}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
