"""The README links only what ships with the repository (pip users have nothing beside it)."""

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]


def test_readme_links_stay_inside_the_repository():
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    targets = re.findall(r"\]\(([^)#]+)\)", text)
    local = [t for t in targets if "://" not in t]
    assert [t for t in local if t.startswith("..") or not (ROOT / t).exists()] == []
    assert "../shared" not in text.replace("../shared/traces", "")
