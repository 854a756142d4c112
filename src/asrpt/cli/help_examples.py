"""The examples that end each command's ``--help``, keyed by the parser's ``prog``.

Kept apart from the option definitions so one place shows how the commands are used; a test
fails on a parser without an entry here.
"""

from __future__ import annotations

EXAMPLES: dict[str, tuple[str, ...]] = {
    "asrpt": (
        "asrpt demo                       # replay the bundled trace, write asrpt-demo.png",
        "asrpt queue --me                 # my jobs in scheduling order, with predicted start and end",
        "asrpt completion bash > ~/.local/share/bash-completion/completions/asrpt",
    ),
    "asrpt simulate": (
        "asrpt simulate --trace pai.csv --trace-format pai --cluster pai",
        "asrpt simulate --trace philly.csv --trace-format philly --cluster philly --policy asrpt --policy fifo \\",
        "    --seeds 0,1,2 --json-out report.json --plot jct.png",
    ),
    "asrpt demo": ("asrpt demo", "asrpt demo --limit 500 --plot /tmp/demo.png --json-out /tmp/demo.json"),
    "asrpt db": ("asrpt db upgrade", "asrpt db prune --older-than-days 365"),
    "asrpt db upgrade": ("asrpt db upgrade --config /etc/asrpt/asrpt.toml",),
    "asrpt db prune": ("asrpt db prune --older-than-days 365",),
    "asrpt db grant-reader": ("asrpt db grant-reader asrpt_reader",),
    "asrpt predict": ("asrpt predict evaluate --trace pai.csv",),
    "asrpt predict evaluate": (
        "asrpt predict evaluate --trace pai.csv --trace-format pai",
        "asrpt predict evaluate --trace pai.csv --retrain-every 0 --json > report.json",
    ),
    "asrpt serving": (
        "asrpt serving fit --profile perf_model.csv --profile-format splitwise --json-out fit.json",
        "asrpt serving route-sim --trace conv.csv --fit fit.json",
    ),
    "asrpt serving fit": ("asrpt serving fit --profile perf_model.csv --profile-format splitwise --json-out fit.json",),
    "asrpt serving plan": (
        "asrpt serving plan --model llama2-70b --cluster a100x8+v100x4 --fit fit.json --trace conv.csv "
        "--json-out plan.json",
    ),
    "asrpt serving route-sim": (
        "asrpt serving route-sim --trace conv.csv --fit fit.json --instances a100-80gb:tp2,h100-80gb:tp2 \\",
        "    --json-out route.json --plot route.png",
    ),
    "asrpt serving router": (
        "asrpt serving router --backend http://gpu1:8000 --backend http://gpu2:8000 --listen 0.0.0.0:8080",
    ),
    "asrpt bench": ("asrpt bench cycle --json", "asrpt bench policies --quick"),
    "asrpt bench cycle": ("asrpt bench cycle --pending 10000 --running 1000 --nodes 1000 --json",),
    "asrpt bench daemon": ("asrpt bench daemon --pending 10000 --running 1000 --nodes 1000",),
    "asrpt bench policies": ("asrpt bench policies --quick", "asrpt bench policies --json-out matrix.json --markdown matrix.md"),
    "asrpt queue": (
        "asrpt queue --me",
        "asrpt queue -u alice -p gpu -t PENDING --start",
        "asrpt queue -j 123,124 --json",
    ),
    "asrpt eta": ("asrpt eta 123", "asrpt eta 123 --json"),
    "asrpt explain": ("asrpt explain 123", "asrpt explain 123 --json"),
    "asrpt completion": ("asrpt completion bash > ~/.local/share/bash-completion/completions/asrpt",
                         "asrpt completion zsh > ~/.zfunc/_asrpt"),
    "asrpt man": ("asrpt man --directory ~/.local/share/man/man1 && man asrpt",),
    "asrptd": (
        "asrptd --config /etc/asrpt/asrpt.toml",
        "asrptd --once --dry-run --log-level DEBUG    # one cycle, nothing written to Slurm",
    ),
}
