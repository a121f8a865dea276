"""Reading anefit's HTML report back: its embedded JSON, SVG nodes, CSS colours
and every URL it mentions; and building the full-size LFM2.5-1.2B-shaped
program (bench/check_lfm2_1p2b.py) the report tests run on."""

import html.parser
import json
import os
import re
import sys

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def build_lfm2_1p2b(out_dir):
    """(package path, op count) of the 1.2B-shaped decode program, written with
    a sparse weight file (check never reads weights)."""
    bench = os.path.join(REPO_ROOT, "bench")
    if bench not in sys.path:
        sys.path.insert(0, bench)
    import check_lfm2_1p2b  # noqa: E402

    pkg, nops, _ = check_lfm2_1p2b.build_model(str(out_dir))
    return pkg, nops


class Report:
    """A parsed report page."""

    def __init__(self, text):
        self.text = text
        self.scripts = {}
        for m in re.finditer(r'<script type="application/json" id="([^"]+)">(.*?)</script>', text, re.S):
            self.scripts[m.group(1)] = json.loads(m.group(2))
        self.check = self.scripts["anefit-check"]
        self.graph = self.scripts["anefit-graph"]
        self.split = self.scripts.get("anefit-split")
        self.colors = dict(re.findall(r"\.(p-[a-z0-9-]+|v-[a-z0-9-]+|e-[a-z0-9-]+)\{--c:(#[0-9a-f]{6})\}", text))
        parser = _Elements()
        parser.feed(text)
        self.elements = parser.elements  # (tag, attrs dict, function index)

    def op_nodes(self):
        """{function index: [(op index, class list)]} from the SVG."""
        out = {}
        for tag, attrs, fn in self.elements:
            cls = attrs.get("class", "").split()
            if tag == "g" and cls[:1] == ["op"]:
                out.setdefault(fn, []).append((int(attrs["data-i"]), cls))
        return out

    def urls(self):
        """Every http(s) URL anywhere in the page, and every src/href/url()
        reference that is not a same-page fragment."""
        found = set(re.findall(r"https?://[^\s\"'<>()\\]+", self.text))
        refs = []
        for tag, attrs, _ in self.elements:
            for key in ("src", "href", "xlink:href", "srcset", "action", "data"):
                if key in attrs and not attrs[key].startswith("#"):
                    refs.append((tag, key, attrs[key]))
        css_urls = [u for u in re.findall(r"url\(([^)]*)\)", self.text) if not u.startswith("#")]
        return found, refs, css_urls


class _Elements(html.parser.HTMLParser):
    def __init__(self):
        super().__init__(convert_charrefs=True)
        self.elements = []
        self.fn = None
        self.depth = []

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        if tag == "g" and a.get("class") == "fn":
            self.fn = int(a["data-f"])
        self.elements.append((tag, a, self.fn))
