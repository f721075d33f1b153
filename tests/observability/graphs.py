"""Dashboard queries as graphs on Prometheus' own graph page, rendered by headless Chromium: the
screenshots in docs/observability/ (tests/observability/screenshots). Used by
tests/observability/test_dashboards.py (the broker dashboards) and tests/k8s/helm_e2e.py (the
operator's, whose metrics exist only where an operator runs)."""

from __future__ import annotations

import shutil
import subprocess
import urllib.parse
from pathlib import Path

#: Queries per page: Prometheus 2.42's graph page reads panels g0 to g9 only (g10 on come up
#: empty or not at all).
PER_PAGE = 10


def render(prometheus: str, name: str, exprs: list[str], out: Path, range_input: str) -> list[Path]:
    """Renders `exprs` over the last `range_input` (Prometheus' syntax: 2m) from the Prometheus at
    `prometheus` (http://host:port) as `<out>/<name>.png`, `<name>-2.png`, ... (a page per ten)."""
    chromium = shutil.which("chromium") or shutil.which("chromium-browser")
    if chromium is None:
        raise RuntimeError("screenshots need Chromium: apt-get install chromium")
    out.mkdir(parents=True, exist_ok=True)
    pngs = []
    for page, start in enumerate(range(0, len(exprs), PER_PAGE), 1):
        chunk = exprs[start:start + PER_PAGE]
        params = {}
        for i, expr in enumerate(chunk):
            params.update({f"g{i}.expr": expr, f"g{i}.tab": "0", f"g{i}.range_input": range_input,
                           f"g{i}.stacked": "0", f"g{i}.show_exemplars": "0"})
        png = out / (f"{name}.png" if page == 1 else f"{name}-{page}.png")
        subprocess.run([chromium, "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars",
                        f"--window-size=1280,{100 + 700 * len(chunk)}", "--virtual-time-budget=20000",
                        f"--screenshot={png}", f"{prometheus}/graph?{urllib.parse.urlencode(params)}"],
                       check=True, capture_output=True, timeout=120)
        if png.stat().st_size <= 10_000:
            raise RuntimeError(f"{png} looks empty")
        pngs.append(png)
    return pngs
