"""Findings are data: what a detector found, the numbers that show it (each with where it came
from), how much of the request time it explains, and the patches that would fix it."""
from __future__ import annotations

import shlex
from dataclasses import asdict, dataclass, field

SEVERITIES = ("high", "medium", "low", "info")
# repeated-query's statement before any fingerprint: two literals of one shape (site_name and
# date_format from `settings`) are two findings, each fixed or not on its own
SUBJECT_KEYS = ("statement", "fingerprint", "function", "extension", "walker", "table", "case")


@dataclass
class Evidence:
    """One number or fact and its source, e.g. ("opendir calls per request", 512,
    "xhprof of r000004, r000054"), so a reader can check it in the bundle."""
    what: str
    value: object
    source: str


@dataclass
class Remediation:
    """A concrete change: `diff` (unified diff against a file the target declares patchable),
    `sql` (statements for the target's database) or `ini` (php.ini lines); `checked` says how
    it was checked before being proposed (empty: not checked)."""
    kind: str
    content: str
    checked: str = ""
    file: str | None = None          # the patched file, relative to the app tree (diff)
    steps: list = field(default_factory=list)   # commands to run after applying (e.g. a rebuild)
    description: str = ""
    writes: list | None = None       # app-tree paths (files, directories) the steps write; None: any
    origin: str = ""                 # "recipe" (the catalogue), "generated" (derived by lockdown from
                                     # the evidence), "engine" (settings a detector names); "": older runs


def remediation_names(rems) -> str:
    """Remediations as the lines about verifications and rounds name them: "diff config.php,
    sql" (kind, and the file a diff patches); Remediation objects or their JSON dicts."""
    def one(r) -> str:
        kind, file = (r.get("kind"), r.get("file")) if isinstance(r, dict) else (r.kind, r.file)
        return f"{kind} {file}" if file else str(kind)
    return ", ".join(one(r) for r in rems)


def split_steps(steps) -> tuple[list[str], list[str]]:
    """A remediation's steps as text: (commands run in the app tree -- argv lists, shell-quoted --,
    the operator's own steps -- strings, e.g. "systemctl restart php8.2-fpm" after php.ini lines,
    which verify does not run). Joining a string's characters printed "s y s t e m c t l"."""
    tree, operator = [], []
    for s in steps or []:
        if isinstance(s, (list, tuple)):
            tree.append(shlex.join(map(str, s)))
        else:
            operator.append(str(s))
    return tree, operator


@dataclass
class Finding:
    id: str                          # the detector's id: fs-scan, n-plus-one, ...
    title: str
    severity: str                    # high | medium | low | info
    share_pct: float | None          # estimated share of request time explained
    summary: str                     # one paragraph: what happens and why it costs
    evidence: list[Evidence] = field(default_factory=list)
    remediations: list[Remediation] = field(default_factory=list)
    urls: list[str] = field(default_factory=list)      # where it shows
    requests: list[str] = field(default_factory=list)  # example request ids
    details: dict = field(default_factory=dict)        # detector-specific data (tables, call chains)
    key: str = ""        # unique within a run: the id, or id-2, id-3... when a detector finds several

    @property
    def is_defect(self) -> bool:
        return self.severity != "info"

    @property
    def subject(self) -> str:
        """What the finding is about, stable across captures (keys like repeated-call-2 are
        not): the statement (or its fingerprint), function, table or extension its detector names."""
        for k in SUBJECT_KEYS:
            if self.details.get(k):
                return f"{self.id}:{self.details[k]}"
        return self.id

    def to_json(self) -> dict:
        return asdict(self)

    @classmethod
    def from_json(cls, d: dict) -> "Finding":
        d = dict(d)
        d["evidence"] = [Evidence(**e) for e in d.get("evidence", [])]
        d["remediations"] = [Remediation(**r) for r in d.get("remediations", [])]
        return cls(**d)


def predicted_ratio(share_pct: float | None) -> float | None:
    """The RPS ratio a fix that removes `share_pct` of every request's time would give, for
    a server limited by request time: 1 / (1 - share). What `verify` measures is compared
    with it (docs/detectors.md, calibration)."""
    if share_pct is None or not 0 <= share_pct < 100:
        return None
    return 1 / (1 - share_pct / 100)


def severity_for(share_pct: float | None, high: float = 10.0, medium: float = 3.0) -> str:
    if share_pct is None:
        return "low"
    return "high" if share_pct >= high else "medium" if share_pct >= medium else "low"
