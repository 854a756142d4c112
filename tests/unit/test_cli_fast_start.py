"""`asrpt --help` and the read-only commands must start fast: the CLI's parser modules keep
literal copies of a few registries instead of importing numpy, scikit-learn or SQLAlchemy.
These tests keep the copies honest and the imports light."""

import subprocess
import sys

from asrpt.cli import predict_commands, simulate


def test_literal_registries_match_the_real_ones():
    from asrpt.core.dispatch import DISPATCH_MODES
    from asrpt.core.policies import POLICIES
    from asrpt.core.policies.asrpt import QUEUE_ORDERS, VIRTUAL_MACHINES
    from asrpt.predict.predictor import UNSEEN_POLICIES
    from asrpt.sim.predictors import PREDICTOR_NAMES
    from asrpt.sim.traces import TRACE_FORMATS

    assert set(simulate.POLICY_NAMES) == set(POLICIES)
    assert set(simulate.TRACE_FORMAT_NAMES) == set(TRACE_FORMATS)
    assert set(simulate.PREDICTOR_NAMES) == set(PREDICTOR_NAMES)
    assert tuple(simulate.DISPATCH_MODES) == tuple(DISPATCH_MODES)
    assert tuple(simulate.QUEUE_ORDERS) == tuple(QUEUE_ORDERS)
    assert tuple(simulate.VIRTUAL_MACHINES) == tuple(VIRTUAL_MACHINES)
    assert set(predict_commands.UNSEEN_POLICIES) == set(UNSEEN_POLICIES)
    assert tuple(simulate.UNSEEN_POLICIES) == tuple(UNSEEN_POLICIES)
    from asrpt.sim.cluster import DEFAULT_REQUEUE_COST

    assert simulate.REQUEUE_COST_DEFAULT == DEFAULT_REQUEUE_COST


def test_building_the_parser_imports_nothing_heavy():
    code = (
        "import sys; from asrpt.cli.main import build_parser; build_parser(); "
        "heavy = [m for m in ('numpy', 'sklearn', 'sqlalchemy', 'networkx', 'scipy', 'matplotlib') if m in sys.modules]; "
        "print(','.join(heavy))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.strip()
    assert out == ""
