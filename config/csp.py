"""The Content-Security-Policy of every response (config/middleware.py), built once at start-up.

Scripts come from this server only, never inline. Styles likewise, with two exceptions that run no code:
style attributes (the pages size bars with them, Plotly draws with them), and the <style> elements the
Plotly bundle adds itself — an empty one it fills through the CSSOM, and one with a fixed stylesheet. Those
are allowed by the hash of their exact text, read from the installed bundle, so a Plotly upgrade keeps
working and nothing else can slip in.
"""

import base64
import hashlib
import re
from pathlib import Path

# `e.textContent='...'` of a <style> the bundle creates (its text has no quotes or backslashes today; a
# bundle whose text had them would fail to match, and the browser test of the policy would say so).
_BUNDLED_STYLE = re.compile(r'createElement\("style"\);\w+\.id="[0-9a-f]+",\w+\.textContent=\'([^\'\\]*)\'')


def _hash(text: str) -> str:
    return "'sha256-" + base64.b64encode(hashlib.sha256(text.encode()).digest()).decode() + "'"


def plotly_style_hashes(bundle: Path) -> list[str]:
    try:
        source = bundle.read_text(encoding="utf-8")
    except OSError:
        return []
    return [_hash(""), *(_hash(text) for text in _BUNDLED_STYLE.findall(source))]


def content_security_policy(plotly_bundle: Path) -> str:
    return "; ".join([
        "default-src 'self'",
        "script-src 'self'",
        "style-src 'self' " + " ".join(plotly_style_hashes(plotly_bundle)),
        "style-src-attr 'unsafe-inline'",
        "img-src 'self' data:",
        "font-src 'self'",
        "connect-src 'self'",
        "object-src 'none'",
        "base-uri 'self'",
        "form-action 'self'",
        "frame-ancestors 'none'",
    ])
