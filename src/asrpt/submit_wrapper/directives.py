"""Pure parsing of an sbatch command line, of ``#SBATCH`` lines and of ``#ASRPT`` directives.

Nothing here does I/O and nothing raises on bad input: every function takes text and returns
what it understood plus a list of problems. The wrapper uses the result only to *annotate* a
submission; what Slurm does is decided by the real sbatch, which always gets the user's argv
unchanged. So the one place where a parsing mistake could change behaviour is the decision
"the script comes from stdin" (the wrapper then reads stdin to record it); :attr:`ArgvInfo.confident`
is False whenever the command line holds something this module does not know, and the wrapper
then leaves a piped stdin alone.

The sbatch semantics below were checked against Slurm 22.05 (Debian 12), option by option
(``sbatch --NAME`` / ``--NAME=x`` / ``-C`` for every name and letter):

* options are parsed by ``getopt_long`` with a leading ``+``: parsing stops at the first
  non-option, which is the script; everything after it belongs to the script. ``--`` ends the
  options. A lone ``:`` separates the components of a heterogeneous job
  (``sbatch -p a : -p b job.sh``). ``-`` is an ordinary file name, not stdin.
* long options may be abbreviated to a unique prefix (``--part=gpu``); ``--opt=value`` and
  ``--opt value`` are equivalent for options with a required argument, while an *optional*
  argument (``--exclusive[=user]``, ``--nice[=N]``) is only taken with ``=``.
* short options cluster (``-Hv``) and take their argument attached or as the next word
  (``-N2``, ``-N 2``; ``-J=x`` names the job ``=x``).
* ``#SBATCH`` must start at column 0 and is case-sensitive; the rest of the line is split
  into words like a tiny shell: ``"..."`` and ``'...'`` group (and join adjacent text), a
  backslash takes the next character literally (before whitespace it is dropped), and an
  unquoted ``#`` starts a comment. sbatch stops reading directives at the first line that is
  neither blank nor a comment (an indented ``# comment`` does not stop it). A word that is
  not an option is an error for sbatch; ``#SBATCH hetjob`` (or ``packjob``) starts the next
  component.
* ``--quiet`` suppresses the ``Submitted batch job N`` line altogether, so no job id can be
  learned from the output (the wrapper then records nothing).

``#ASRPT`` lines (same position rules as ``#SBATCH``, followed by whitespace) carry
``key=value`` words: ``model``, ``class``, ``parallel=DxPxT`` or ``dp``/``pp``/``tp``,
``micro_batches``, ``iterations`` and, for an LLM serving job, ``serve-model=NAME`` with
``tp=auto`` (the daemon picks the tensor-parallel degree and the partition from the
deployment optimiser's plan) or ``tp=N``. A bad value is ignored with a warning that names
the directive; nothing in them can raise a job's priority by itself (see
:mod:`asrpt.ingest.wrapper_spool`). The serving model's name is recorded as given: whether
asrpt knows the model is the daemon's question (it says so in its log and schedules the job
as an ordinary one), never a reason to touch the submission.

Start-up matters (the wrapper runs on every submission): this module imports only the light
:mod:`asrpt.comment_hints` (shared with the daemon, so both read hints by one rule), uses
string methods rather than regular expressions (each compiled pattern costs start-up time)
and plain classes with ``__slots__`` instead of dataclasses (``dataclasses`` pulls in
``inspect``).
"""

from __future__ import annotations

from asrpt.comment_hints import MAX_DEGREE, MAX_MICRO_BATCHES, MAX_NAME_CHARS, is_name, parse_comment_hints, positive_int

NO_ARG = 0
REQUIRED = 1
OPTIONAL = 2

_REQUIRED_22_05 = (
    "account acctg-freq array batch begin bb bbf cluster-constraint chdir cluster clusters "
    "comment container context constraint core-spec cores-per-socket cpu-freq cpus-per-gpu "
    "cpus-per-task deadline delay-boot dependency distribution error exclude export export-file "
    "extra-node-info gid gpu-bind gpu-freq gpus gpus-per-node gpus-per-socket gpus-per-task gres "
    "gres-flags hint input job-name kill-on-invalid-dep licenses mail-type mail-user mcs-label "
    "mem mem-bind mem-per-cpu mem-per-gpu mincpus network nodefile nodelist nodes ntasks "
    "ntasks-per-core ntasks-per-gpu ntasks-per-node ntasks-per-socket ntasks-per-tres open-mode "
    "output partition power prefer priority profile qos reservation signal sockets-per-node "
    "switches tasks-per-node thread-spec threads-per-core time time-min tmp uid wait-all-nodes "
    "wckey wrap"
)
_NO_ARG_22_05 = (
    "contiguous help hold ignore-pbs no-requeue overcommit oversubscribe parsable quiet reboot "
    "requeue spread-job test-only use-min-nodes usage verbose version wait"
)
_OPTIONAL_22_05 = "exclusive get-user-env nice no-kill propagate"
# Added after 22.05 (Slurm documentation of 23.02-25.05; not checked against a binary here).
_REQUIRED_LATER = "container-id extra segment tres-bind tres-per-task"
_NO_ARG_LATER = "stepmgr"
_OPTIONAL_LATER = "oom-kill-step"

#: Long option name -> NO_ARG, REQUIRED or OPTIONAL.
LONG_OPTIONS: dict[str, int] = {}
for _names, _kind in (
    (_REQUIRED_22_05, REQUIRED),
    (_NO_ARG_22_05, NO_ARG),
    (_OPTIONAL_22_05, OPTIONAL),
    (_REQUIRED_LATER, REQUIRED),
    (_NO_ARG_LATER, NO_ARG),
    (_OPTIONAL_LATER, OPTIONAL),
):
    for _name in _names.split():
        LONG_OPTIONS[_name] = _kind

#: Spellings getopt treats as one option (same ``val``), mapped to the name we record.
ALIASES: dict[str, str] = {"cluster": "clusters", "tasks-per-node": "ntasks-per-node"}

#: Short option -> long option name (the argument kind is the long option's).
SHORT_OPTIONS: dict[str, str] = {
    "a": "array", "A": "account", "b": "begin", "B": "extra-node-info", "c": "cpus-per-task",
    "C": "constraint", "d": "dependency", "D": "chdir", "e": "error", "F": "nodefile",
    "G": "gpus", "h": "help", "H": "hold", "i": "input", "J": "job-name", "k": "no-kill",
    "L": "licenses", "m": "distribution", "M": "clusters", "n": "ntasks", "N": "nodes",
    "o": "output", "O": "overcommit", "p": "partition", "q": "qos", "Q": "quiet",
    "s": "oversubscribe", "S": "core-spec", "t": "time", "v": "verbose", "V": "version",
    "w": "nodelist", "W": "wait", "x": "exclude",
}  # fmt: skip

#: Options after which sbatch prints something other than a job id, or nothing at all, and
#: submits no job the wrapper could record: the wrapper execs the real sbatch for these.
PASSTHROUGH_OPTIONS = frozenset({"help", "usage", "version", "test-only", "quiet"})

_WHITESPACE = " \t\n\v\f\r"


class ArgvInfo:
    """What the command line asks for, as far as the wrapper needs to know."""

    __slots__ = ("options", "components", "script", "script_args", "wrap", "confident", "problems")

    def __init__(self) -> None:
        #: Options of the first (or only) job component, canonical long name -> value
        #: (True for a flag or an optional argument left out); a repeated option keeps the last.
        self.options: dict[str, str | bool] = {}
        #: Number of heterogeneous-job components on the command line (``:`` separated).
        self.components = 1
        #: The script path as given (relative to the submit directory), or None.
        self.script: str | None = None
        #: Arguments after the script, passed to it by Slurm.
        self.script_args: list[str] = []
        #: The ``--wrap`` command, or None.
        self.wrap: str | None = None
        #: False if anything was not understood (unknown, ambiguous or malformed option).
        self.confident = True
        #: What was not understood, for the record (sbatch reports its own errors).
        self.problems: list[str] = []

    @property
    def script_source(self) -> str:
        """``wrap``, ``file`` or ``stdin``: where sbatch takes the job script from."""
        if self.wrap is not None:
            return "wrap"
        return "file" if self.script is not None else "stdin"

    @property
    def passthrough(self) -> str | None:
        """The option that makes recording pointless (help, version, test-only, quiet), if any."""
        for name in PASSTHROUGH_OPTIONS:
            if name in self.options:
                return name
        return None


def _resolve_long(name: str) -> tuple[str | None, str | None]:
    """Map a possibly abbreviated long option to (canonical name, None) or (None, problem)."""
    if name in LONG_OPTIONS:
        return ALIASES.get(name, name), None
    matches = {ALIASES.get(known, known) for known in LONG_OPTIONS if known.startswith(name)}
    if len(matches) == 1:
        return matches.pop(), None
    if not matches:
        return None, f"unknown option --{name}"
    return None, f"ambiguous option --{name}"


def _parse_options(words: list[str], start: int, info: ArgvInfo) -> tuple[int, dict[str, str | bool]]:
    """Parse options from ``words[start:]`` like getopt_long with ``+``; return (index of the
    first non-option word, the options). Problems go to ``info``."""
    options: dict[str, str | bool] = {}
    i = start
    n = len(words)

    def problem(text: str) -> None:
        info.confident = False
        info.problems.append(text)

    while i < n:
        word = words[i]
        if word == "--":
            return i + 1, options
        if word.startswith("--"):
            name, eq, value = word[2:].partition("=")
            canonical, trouble = _resolve_long(name)
            if canonical is None:
                # An unknown option may be a SPANK plugin's (``--container-image=...``): keep
                # it under the name given, but we cannot know whether the next word is its value.
                problem(trouble or f"bad option {word}")
                options[name] = value if eq else True
                i += 1
                continue
            kind = LONG_OPTIONS.get(canonical, LONG_OPTIONS.get(name, NO_ARG))
            if kind == REQUIRED:
                if eq:
                    options[canonical] = value
                elif i + 1 < n:
                    options[canonical] = words[i + 1]
                    i += 1
                else:
                    problem(f"option --{canonical} requires an argument")
            elif kind == OPTIONAL:
                options[canonical] = value if eq else True
            else:
                if eq:
                    problem(f"option --{canonical} takes no argument")
                options[canonical] = True
            i += 1
            continue
        if word.startswith("-") and len(word) > 1:
            j = 1
            while j < len(word):
                letter = word[j]
                long_name = SHORT_OPTIONS.get(letter)
                if long_name is None:
                    problem(f"unknown option -{letter}")
                    j += 1
                    continue
                kind = LONG_OPTIONS[long_name]
                rest = word[j + 1 :]
                if kind == REQUIRED:
                    if rest:
                        options[long_name] = rest
                    elif i + 1 < n:
                        options[long_name] = words[i + 1]
                        i += 1
                    else:
                        problem(f"option -{letter} requires an argument")
                    break
                if kind == OPTIONAL:
                    options[long_name] = rest if rest else True
                    break
                options[long_name] = True
                j += 1
            i += 1
            continue
        return i, options
    return i, options


def parse_argv(args: list[str]) -> ArgvInfo:
    """Parse sbatch's arguments (without the program name). Never raises."""
    info = ArgvInfo()
    try:
        i, first = _parse_options(args, 0, info)
        info.options = first
        # Further components of a heterogeneous job: ``opts : opts : opts script``.
        while i < len(args) and args[i] == ":":
            info.components += 1
            i, _ = _parse_options(args, i + 1, info)
        if i < len(args):
            info.script = args[i]
            info.script_args = list(args[i + 1 :])
        wrap = first.get("wrap")
        if isinstance(wrap, str):
            info.wrap = wrap
    except Exception as exc:  # a bug here must not cost the user the submission
        info.confident = False
        info.problems.append(f"internal error: {exc!r}")
    return info


def split_directive(text: str) -> tuple[list[str], str | None]:
    """Split the part of an ``#SBATCH``/``#ASRPT`` line after the keyword into words, the way
    sbatch does (quotes group, backslash escapes, unquoted ``#`` ends the line).

    Returns (words, problem); problem is e.g. an unmatched quote (sbatch rejects the script).
    """
    words: list[str] = []
    current: list[str] = []
    in_word = False
    quote = ""
    i = 0
    n = len(text)
    while i < n:
        ch = text[i]
        if quote:
            if ch == "\\" and i + 1 < n:
                current.append(text[i + 1])
                i += 2
                continue
            if ch == quote:
                quote = ""
            else:
                current.append(ch)
            i += 1
            continue
        if ch == "\\":
            if i + 1 < n and text[i + 1] not in _WHITESPACE:
                current.append(text[i + 1])
                in_word = True
                i += 2
            else:
                i += 1
            continue
        if ch == '"' or ch == "'":
            quote = ch
            in_word = True
        elif ch in _WHITESPACE:
            if in_word:
                words.append("".join(current))
                current = []
                in_word = False
        elif ch == "#":
            break
        else:
            current.append(ch)
            in_word = True
        i += 1
    if quote:
        return words, f"unmatched {quote}"
    if in_word:
        words.append("".join(current))
    return words, None


# ---- #ASRPT ------------------------------------------------------------------------------

#: Keys of ``#ASRPT`` and the record field each sets.
ASRPT_KEYS: dict[str, str] = {
    "model": "model",
    "class": "workload_class",
    "parallel": "parallel",
    "dp": "parallel_data",
    "pp": "parallel_pipeline",
    "tp": "parallel_tensor",
    "micro_batches": "micro_batches",
    "iterations": "iterations",
    "serve-model": "serve_model",
}
#: Other spellings accepted for a key.
ASRPT_KEY_ALIASES: dict[str, str] = {
    "serve_model": "serve-model",
    "model_name": "model",
    "workload_class": "class",
    "microbatches": "micro_batches",
    "micro-batches": "micro_batches",
    "iters": "iterations",
}
#: The fields of :attr:`ScriptInfo.asrpt`, in record order.
ASRPT_FIELDS = (
    "model",
    "workload_class",
    "parallel_data",
    "parallel_pipeline",
    "parallel_tensor",
    "micro_batches",
    "iterations",
    "serve_model",
    "parallel_tensor_auto",
)
#: ``tp=auto``: the daemon chooses the tensor-parallel degree (from the serving plan).
TP_AUTO = "auto"
_NUMBER_CHARS = frozenset("0123456789.eE+")
_MAX_ITERATIONS = 1e13


def _positive_number(value: str, limit: float) -> float | None:
    """A plain decimal like ``100000``, ``2.5`` or ``1e5`` (no inf, nan or underscores)."""
    if not value or not all(ch in _NUMBER_CHARS for ch in value):
        return None
    try:
        number = float(value)
    except ValueError:
        return None
    return number if 0.0 < number <= limit else None


def parse_asrpt_words(words: list[str], where: str) -> tuple[dict[str, object], list[str]]:
    """Turn the words of one ``#ASRPT`` line into fields and warnings (bad values ignored)."""
    fields: dict[str, object] = {}
    warnings: list[str] = []
    for word in words:
        key, eq, value = word.partition("=")
        shown = _shorten(word)
        if not eq or not key:
            warnings.append(f"{where}: #ASRPT {shown} is not key=value; ignored")
            continue
        key = ASRPT_KEY_ALIASES.get(key, key)
        target = ASRPT_KEYS.get(key)
        if target is None:
            known = ", ".join(sorted(ASRPT_KEYS))
            warnings.append(f"{where}: #ASRPT {shown}: unknown key {_shorten(key)!r} (known: {known}); ignored")
            continue
        if target in ("model", "workload_class", "serve_model"):
            if is_name(value):
                fields[target] = value
            else:
                warnings.append(
                    f"{where}: #ASRPT {shown}: expected a name of letters, digits and _.:/+@- "
                    f"(at most {MAX_NAME_CHARS} characters); ignored"
                )
        elif target == "parallel":
            degrees = [positive_int(part, MAX_DEGREE) for part in value.lower().split("x")]
            if len(degrees) == 3 and None not in degrees:
                fields["parallel_data"], fields["parallel_pipeline"], fields["parallel_tensor"] = degrees
                fields.pop("parallel_tensor_auto", None)
            else:
                warnings.append(
                    f"{where}: #ASRPT {shown}: expected data x pipeline x tensor degrees, "
                    "positive integers like parallel=2x2x4; ignored"
                )
        elif target == "parallel_tensor" and value.lower() == TP_AUTO:
            fields["parallel_tensor_auto"] = True
            fields.pop("parallel_tensor", None)
        elif target in ("parallel_data", "parallel_pipeline", "parallel_tensor", "micro_batches"):
            limit = MAX_MICRO_BATCHES if target == "micro_batches" else MAX_DEGREE
            number = positive_int(value, limit)
            if number is None:
                auto = ", or auto" if target == "parallel_tensor" else ""
                warnings.append(f"{where}: #ASRPT {shown}: expected a positive integer up to {limit}{auto}; ignored")
            else:
                fields[target] = number
                if target == "parallel_tensor":
                    fields.pop("parallel_tensor_auto", None)
        else:  # iterations
            parsed = _positive_number(value, _MAX_ITERATIONS)
            if parsed is None:
                warnings.append(f"{where}: #ASRPT {shown}: expected a positive number of iterations; ignored")
            else:
                fields[target] = int(parsed) if parsed.is_integer() else parsed
    return fields, warnings


#: Workload classes of the packaged speed table (asrpt/data/speed_table.json; a test keeps
#: them equal), so that the wrapper can warn about an unknown one without loading the table.
KNOWN_WORKLOAD_CLASSES = (
    "a3c", "cyclegan", "lm", "recommendation", "resnet18", "resnet50", "transformer", "bert",
    "cifar10", "deepspeech2", "imagenet", "ncf", "yolov3",
)  # fmt: skip


def _class_key(name: str) -> str:
    """The speed table's lookup key: case-insensitive, ignoring ``-``, ``_`` and whitespace."""
    return "".join(ch for ch in name.lower() if ch not in "-_" and not ch.isspace())


def workload_class_problem(name: str, where: str) -> str | None:
    """A warning if the daemon's speed table does not know ``name`` (it is then scheduled as
    an ordinary job), else None."""
    if _class_key(name) in {_class_key(c) for c in KNOWN_WORKLOAD_CLASSES}:
        return None
    return (
        f"{where}: workload class {_shorten(name)!r} is unknown (known: {', '.join(KNOWN_WORKLOAD_CLASSES)}); "
        "submitted, but asrpt schedules the job as an ordinary one"
    )


def comment_problems(comment: str) -> list[str]:
    """Warnings for the ``asrpt:`` hints of a ``--comment`` the daemon cannot use: the ones
    :func:`asrpt.comment_hints.parse_comment_hints` drops, and a class the speed table lacks."""
    hints = parse_comment_hints(comment)
    problems = list(hints.problems)
    if hints.workload_class is not None:
        problem = workload_class_problem(hints.workload_class, "--comment asrpt:class")
        if problem:
            problems.append(problem)
    return problems


def merge_asrpt_fields(into: dict[str, object], fields: dict[str, object]) -> None:
    """Add one line's fields to those of earlier lines: a later value wins, and a later
    ``tp=N`` (or ``parallel=``) cancels an earlier ``tp=auto`` and the other way round."""
    if "parallel_tensor" in fields:
        into.pop("parallel_tensor_auto", None)
    if "parallel_tensor_auto" in fields:
        into.pop("parallel_tensor", None)
    into.update(fields)


def _shorten(text: str, limit: int = 60) -> str:
    text = "".join(ch if ch.isprintable() else "?" for ch in text[: limit + 1])
    return text if len(text) <= limit else text[: limit - 3] + "..."


# ---- the script ---------------------------------------------------------------------------


class ScriptInfo:
    """What the header of a batch script says."""

    __slots__ = ("shebang", "components", "asrpt", "warnings", "problems", "header_lines", "body_start")

    def __init__(self) -> None:
        self.shebang: str | None = None
        #: ``#SBATCH`` options per heterogeneous component (canonical long name -> value).
        self.components: list[dict[str, str | bool]] = [{}]
        #: ``#ASRPT`` fields (see :data:`ASRPT_FIELDS`); only those given appear.
        self.asrpt: dict[str, object] = {}
        #: For the user: bad ``#ASRPT`` directives, each naming the line and directive.
        self.warnings: list[str] = []
        #: For the record: ``#SBATCH`` words not understood (sbatch reports these itself).
        self.problems: list[str] = []
        #: Index of the first line sbatch does not read directives from (len(lines) if none).
        self.body_start = 0
        #: Canonical ``--name=value`` rendering of every directive, for the recurrence group.
        self.header_lines: list[str] = []


def _split_lines(text: str) -> list[str]:
    return text.split("\n")


def _is_keyword_line(line: str, keyword: str) -> bool:
    return line.startswith(keyword) and (len(line) == len(keyword) or line[len(keyword)] in _WHITESPACE)


def scan_script(text: str) -> ScriptInfo:
    """Read the directives of a batch script (``#SBATCH`` and ``#ASRPT``). Never raises."""
    info = ScriptInfo()
    try:
        _scan(text, info)
    except Exception as exc:  # a bug here must not cost the user the submission
        info.problems.append(f"internal error: {exc!r}")
    return info


def _scan(text: str, info: ScriptInfo) -> None:
    lines = _split_lines(text)
    if lines and lines[0].startswith("#!"):
        info.shebang = lines[0].rstrip(_WHITESPACE)
    scratch = ArgvInfo()
    index = 0
    auto_where = ""
    for index, line in enumerate(lines):
        stripped = line.strip(_WHITESPACE)
        if not stripped:
            continue
        if not stripped.startswith("#"):
            break
        if index == 0 and line.startswith("#!"):
            continue
        where = f"line {index + 1}"
        if line.startswith("#SBATCH"):
            words, trouble = split_directive(line[len("#SBATCH") :])
            if trouble:
                info.problems.append(f"{where}: {trouble}")
            if words in (["hetjob"], ["packjob"]):
                info.components.append({})
                info.header_lines.append("hetjob")
                continue
            scratch.problems = []
            end, options = _parse_options(words, 0, scratch)
            if end < len(words):
                info.problems.append(f"{where}: not an option: {_shorten(words[end])}")
            info.problems.extend(f"{where}: {p}" for p in scratch.problems)
            info.components[-1].update(options)
            for name, value in options.items():
                info.header_lines.append(f"--{name}" if value is True else f"--{name}={value}")
        elif _is_keyword_line(line, "#ASRPT"):
            words, trouble = split_directive(line[len("#ASRPT") :])
            if trouble:
                info.warnings.append(f"{where}: #ASRPT line has an {trouble}; ignored")
                continue
            fields, warnings = parse_asrpt_words(words, where)
            merge_asrpt_fields(info.asrpt, fields)
            if "parallel_tensor_auto" in fields:
                auto_where = where
            info.warnings.extend(warnings)
            for key in sorted(fields):
                info.header_lines.append(f"asrpt {key}={fields[key]}")
    else:
        index = len(lines)
    info.body_start = index
    if info.asrpt.get("parallel_tensor_auto") and "serve_model" not in info.asrpt:
        info.warnings.append(
            f"{auto_where}: #ASRPT tp=auto has an effect only on a serving job (add #ASRPT serve-model=NAME); "
            "recorded, but the job keeps its own layout"
        )
    for late in range(index, len(lines)):
        if _is_keyword_line(lines[late], "#ASRPT"):
            info.warnings.append(
                f"line {late + 1}: #ASRPT after the first command is ignored "
                "(directives must come before it, as for #SBATCH)"
            )
            break


# ---- recurrence group ---------------------------------------------------------------------

#: ``#SBATCH`` options that do not change what a job computes; left out of the recurrence
#: group so that ``run-17`` and ``run-18`` of the same script land in the same group.
VOLATILE_OPTIONS = frozenset(
    "begin chdir comment deadline dependency error hold input job-name kill-on-invalid-dep "
    "mail-type mail-user nice open-mode output parsable priority quiet requeue no-requeue "
    "signal test-only verbose wait".split()
)
RECURRENCE_VERSION = "asrpt-recurrence-v1"


def recurrence_text(text: str, info: ScriptInfo | None = None) -> str:
    """The normalised script the recurrence group hashes.

    Normalisation: the shebang is kept; directives are replaced by their canonical rendering
    (``--long-name=value``, one per line, in the order given; volatile options such as the job
    name, output paths and mail settings left out; ``#ASRPT`` keys sorted); other comment lines
    and blank lines are dropped everywhere; trailing whitespace is stripped. So editing a
    comment, reformatting directives or renaming the job keeps the group, while changing the
    commands, the resources or the ``#ASRPT`` description changes it.
    """
    info = info if info is not None else scan_script(text)
    lines = _split_lines(text)
    out = [RECURRENCE_VERSION]
    if info.shebang:
        out.append(info.shebang)
    for rendered in info.header_lines:
        name = rendered[2:].partition("=")[0] if rendered.startswith("--") else ""
        if name not in VOLATILE_OPTIONS:
            out.append(rendered)
    out.append("--")
    for line in lines[info.body_start :]:
        line = line.rstrip(_WHITESPACE)
        stripped = line.lstrip(_WHITESPACE)
        if not stripped or stripped.startswith("#"):
            continue
        out.append(line)
    return "\n".join(out) + "\n"


def wrap_recurrence_text(command: str) -> str:
    """The normalised form of a ``--wrap`` command (whitespace runs collapsed)."""
    return f"{RECURRENCE_VERSION}\nwrap\n{' '.join(command.split())}\n"
