"""expo: a strict parser for Prometheus's text exposition format 0.0.4, as vramd writes it.

parse(text) returns an Exposition (families with their type and help, samples keyed by
name and labels) or raises ExpoError naming the line. Strict on purpose, beyond what
Prometheus itself tolerates, so that a sloppy exposition fails the tests:
  - only "# HELP name text" and "# TYPE name type" comment lines; HELP then TYPE, once per
    family, before its first sample; a family's samples are contiguous;
  - every sample belongs to a declared family (histograms: name_bucket / _sum / _count);
  - metric and label names are valid; label values use only the \\\\, \\" and \\n escapes;
  - no duplicate series; values are floats (or +Inf / -Inf / NaN); the text ends with "\\n";
  - counters end in _total;
  - histograms: for each label set, buckets are cumulative (non-decreasing in le), le="+Inf"
    exists and equals _count, and _sum exists.
"""
import math
import re

NAME_RE = re.compile(r"[a-zA-Z_:][a-zA-Z0-9_:]*\Z")
LABEL_RE = re.compile(r"[a-zA-Z_][a-zA-Z0-9_]*\Z")
TYPES = {"counter", "gauge", "histogram", "summary", "untyped"}


class ExpoError(AssertionError):
    pass


class Exposition:
    def __init__(self):
        self.families = {}   # name -> {"type": ..., "help": ...}
        self.samples = {}    # (name, frozenset(labels.items())) -> float
        self.order = []      # (name, labels dict, value) as written

    def value(self, name, /, **labels):
        """The value of one series (labels must match exactly); KeyError if absent."""
        return self.samples[(name, frozenset(labels.items()))]

    def series(self, name, /, **match):
        """[(labels, value)] of every series of `name` whose labels include `match`."""
        return [(lab, v) for n, lab, v in self.order
                if n == name and all(lab.get(k) == w for k, w in match.items())]

    def histogram(self, name, /, **labels):
        """{"buckets": [(le, cumulative)], "sum": float, "count": float} for one label set."""
        buckets = [(lab["le"], v) for lab, v in self.series(name + "_bucket", **labels)
                   if {k: w for k, w in lab.items() if k != "le"} == labels]
        return {"buckets": buckets, "sum": self.value(name + "_sum", **labels),
                "count": self.value(name + "_count", **labels)}


def _parse_labels(s, lineno):
    """'a="x",b="y"' -> dict; strict about quoting and escapes."""
    labels = {}
    i = 0
    n = len(s)
    while i < n:
        eq = s.find("=", i)
        if eq < 0:
            raise ExpoError(f"line {lineno}: label without '=' in {{{s}}}")
        key = s[i:eq]
        if not LABEL_RE.match(key):
            raise ExpoError(f"line {lineno}: bad label name {key!r}")
        if eq + 1 >= n or s[eq + 1] != '"':
            raise ExpoError(f"line {lineno}: label {key} value not quoted")
        j = eq + 2
        out = []
        while True:
            if j >= n:
                raise ExpoError(f"line {lineno}: unterminated value of label {key}")
            ch = s[j]
            if ch == "\\":
                if j + 1 >= n or s[j + 1] not in '\\"n':
                    raise ExpoError(f"line {lineno}: bad escape in label {key}")
                out.append({"\\": "\\", '"': '"', "n": "\n"}[s[j + 1]])
                j += 2
                continue
            if ch == '"':
                break
            if ch == "\n":
                raise ExpoError(f"line {lineno}: raw newline in label {key}")
            out.append(ch)
            j += 1
        if key in labels:
            raise ExpoError(f"line {lineno}: label {key} twice")
        labels[key] = "".join(out)
        j += 1
        if j < n:
            if s[j] != ",":
                raise ExpoError(f"line {lineno}: expected ',' after label {key}")
            j += 1
        i = j
    return labels


def _split_sample(line, lineno):
    """'name{labels} value' -> (name, labels, value)."""
    brace = line.find("{")
    space = line.find(" ")
    if brace >= 0 and (space < 0 or brace < space):
        name = line[:brace]
        # the closing brace is the last '}' before the value (values never contain '}')
        close = line.rfind("}")
        if close < brace:
            raise ExpoError(f"line {lineno}: unclosed label set")
        labels = _parse_labels(line[brace + 1:close], lineno)
        rest = line[close + 1:]
    else:
        if space < 0:
            raise ExpoError(f"line {lineno}: no value")
        name = line[:space]
        labels = {}
        rest = line[space:]
    if not NAME_RE.match(name):
        raise ExpoError(f"line {lineno}: bad metric name {name!r}")
    if not rest.startswith(" ") or rest.startswith("  "):
        raise ExpoError(f"line {lineno}: expected one space before the value")
    parts = rest[1:].split(" ")
    if len(parts) not in (1, 2):  # value [timestamp]
        raise ExpoError(f"line {lineno}: junk after the value: {rest!r}")
    try:
        value = float(parts[0])
    except ValueError:
        raise ExpoError(f"line {lineno}: bad value {parts[0]!r}") from None
    return name, labels, value


def _family_of(name, families):
    if name in families:
        return name
    for suffix in ("_bucket", "_sum", "_count"):
        if name.endswith(suffix):
            base = name[: -len(suffix)]
            if base in families and families[base]["type"] in ("histogram", "summary"):
                return base
    return None


def parse(text):
    if not text.endswith("\n"):
        raise ExpoError("the exposition does not end with a newline")
    e = Exposition()
    pending_help = {}
    current = None
    finished = set()
    for lineno, line in enumerate(text.split("\n")[:-1], 1):
        if line == "":
            raise ExpoError(f"line {lineno}: empty line")
        if line.startswith("#"):
            parts = line.split(" ", 3)
            if len(parts) < 4 or parts[0] != "#" or parts[1] not in ("HELP", "TYPE"):
                raise ExpoError(f"line {lineno}: unexpected comment {line!r}")
            kind, name, rest = parts[1], parts[2], parts[3]
            if not NAME_RE.match(name):
                raise ExpoError(f"line {lineno}: bad metric name {name!r}")
            if name in e.families or name in pending_help and kind == "HELP":
                raise ExpoError(f"line {lineno}: {kind} for {name} again")
            if kind == "HELP":
                if not rest.strip():
                    raise ExpoError(f"line {lineno}: empty HELP for {name}")
                pending_help[name] = rest
                continue
            if rest not in TYPES:
                raise ExpoError(f"line {lineno}: unknown type {rest!r}")
            if name not in pending_help:
                raise ExpoError(f"line {lineno}: TYPE for {name} without a HELP line before it")
            if rest == "counter" and not name.endswith("_total"):
                raise ExpoError(f"line {lineno}: counter {name} does not end in _total")
            e.families[name] = {"type": rest, "help": pending_help.pop(name)}
            if current is not None:
                finished.add(current)
            current = name
            continue
        name, labels, value = _split_sample(line, lineno)
        fam = _family_of(name, e.families)
        if fam is None:
            raise ExpoError(f"line {lineno}: sample {name} of no declared family")
        if fam != current or fam in finished:
            raise ExpoError(f"line {lineno}: samples of {fam} are not contiguous")
        key = (name, frozenset(labels.items()))
        if key in e.samples:
            raise ExpoError(f"line {lineno}: duplicate series {line!r}")
        e.samples[key] = value
        e.order.append((name, labels, value))
    if pending_help:
        raise ExpoError(f"HELP without TYPE: {sorted(pending_help)}")
    _check_histograms(e)
    return e


def _check_histograms(e):
    for fam, info in e.families.items():
        if info["type"] != "histogram":
            continue
        groups = {}
        for name, labels, value in e.order:
            if name == fam + "_bucket":
                if "le" not in labels:
                    raise ExpoError(f"{fam}_bucket without le: {labels}")
                rest = frozenset((k, v) for k, v in labels.items() if k != "le")
                groups.setdefault(rest, []).append((labels["le"], value))
        for rest, buckets in groups.items():
            les = [float(le) for le, _ in buckets]
            if les != sorted(les) or len(set(les)) != len(les):
                raise ExpoError(f"{fam}{dict(rest)}: le values not increasing: {les}")
            if not math.isinf(les[-1]) or buckets[-1][0] != "+Inf":
                raise ExpoError(f"{fam}{dict(rest)}: no le=\"+Inf\" bucket last")
            counts = [v for _, v in buckets]
            if counts != sorted(counts):
                raise ExpoError(f"{fam}{dict(rest)}: buckets not cumulative: {counts}")
            count = e.samples.get((fam + "_count", rest))
            if count is None or (fam + "_sum", rest) not in e.samples:
                raise ExpoError(f"{fam}{dict(rest)}: _sum or _count missing")
            if counts[-1] != count:
                raise ExpoError(f"{fam}{dict(rest)}: +Inf bucket {counts[-1]} != _count {count}")
