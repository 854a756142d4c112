"""Configuration: typos name the key and the valid ones; environment overrides win."""

import pytest

from asrpt.daemon.config import load_config, parse_config
from asrpt.exceptions import ConfigError


def test_defaults_without_a_file(tmp_path):
    config = parse_config({}, {})
    assert config.daemon.interval_s == 30.0 and config.scheduler.mode == "backfill"
    assert config.scheduler.queue_order == "work" and config.scheduler.overdue_after_s == 7 * 86400.0
    assert parse_config({"scheduler": {"overdue_after_s": float("inf")}}, {}).scheduler.overdue_after_s == float("inf")
    assert config.database.url.startswith("sqlite:")


def test_an_explicit_missing_file_is_an_error(tmp_path):
    with pytest.raises(ConfigError, match="no such configuration file"):
        load_config(tmp_path / "absent.toml", environ={})


@pytest.mark.parametrize(
    "document, message",
    [
        ({"daemon": {"intervall_s": 5}}, "unknown key 'intervall_s' in \\[daemon\\]; valid keys: http_allowed_hosts, http_bind, interval_s"),
        ({"daemon": {"http_allowed_host": ["q.example.org"]}},
         "unknown key 'http_allowed_host' in \\[daemon\\]; valid keys: http_allowed_hosts, http_bind"),
        ({"daemon": {"http_allowed_hosts": ["queue example.org"]}},
         "\\[daemon\\] http_allowed_hosts: 'queue example.org' is not a host name"),
        ({"daemon": {"http_allowed_hosts": ["https://queue.example.org/"]}},
         "http_allowed_hosts: 'https://queue.example.org/' is not a host name \\(a name or name:port, as in a Host header"),
        ({"daemon": {"http_allowed_hosts": 5}}, "\\[daemon\\] http_allowed_hosts must be tuple"),
        ({"deamon": {}}, "unknown section \\[deamon\\]; valid sections: daemon, database"),
        ({"scheduler": {"mode": "fast"}}, "mode = 'fast' is not one of strict, backfill, greedy"),
        ({"scheduler": {"queue_order": "size"}}, "queue_order = 'size' is not one of work, virtual_completion, remaining"),
        ({"scheduler": {"overdue_after_s": -1.0}}, "overdue_after_s must be >= 0"),
        ({"scheduler": {"overdue_after_s": float("nan")}}, "overdue_after_s must be >= 0"),
        ({"daemon": {"interval_s": "soon"}}, "interval_s must be float"),
        ({"daemon": {"interval_s": -1}}, "interval_s must be >= 0"),
        ({"slurm": {"partitions": [{"name": "a100"}]}}, "missing required key\\(s\\): accelerator"),
        ({"slurm": {"partitions": [{"name": "x", "accelerator": "a100"}, {"name": "x", "accelerator": "v100"}]}}, "unique"),
        ({"slurm": {"timeout": 3}}, "unknown key 'timeout' in \\[slurm\\]; valid keys: .*timeout_s"),
        ({"slurm": {"priority_floor": 5}}, "priority_floor"),
        ({"slurm": {"use_sacct": "maybe"}}, "use_sacct must be bool"),
        ({"database": {"url": 5}}, "url must be str"),
        ({"serving": {"plans": "/etc/asrpt/plan.json"}}, "unknown key 'plans' in \\[serving\\]; valid keys: plan$"),
        ({"serving": {"plan": 5}}, "\\[serving\\] plan must be tuple"),
        ({"serving": "plan.json"}, "\\[serving\\] must be a table"),
        (
            {"slurm": {"partitions": [{"name": "a", "accelerator": "a100", "serving_accelerator": "a100-81gb"}]}},
            "serving_accelerator = 'a100-81gb' is not an accelerator the serving tools know; known: a100-80gb, a100-40gb",
        ),
        (
            {"slurm": {"partitions": [{"name": "a", "accelerator": "a100", "serving_acelerator": "a100-40gb"}]}},
            "unknown key 'serving_acelerator' in \\[\\[slurm.partitions\\]\\] #1; valid keys: .*serving_accelerator",
        ),
    ],
)
def test_bad_documents_get_clear_errors(document, message):
    with pytest.raises(ConfigError, match=message):
        parse_config(document, {}, source="test.toml")


INF = float("inf")


@pytest.mark.parametrize(
    "document, message",
    [
        # issue 16: each of these was a traceback (exit 1, a restart loop) or silently accepted
        ({"scheduler": {"backfill_depth": -1}}, r"\[scheduler\] backfill_depth = -1 is not valid: an integer >= 0"),
        ({"daemon": {"interval_s": INF}}, r"\[daemon\] interval_s = inf is not valid: finite seconds >= 0.1"),
        ({"daemon": {"interval_s": 0}}, r"\[daemon\] interval_s = 0.0 is not valid: finite seconds >= 0.1"),
        ({"daemon": {"max_backoff_s": 0}}, r"\[daemon\] max_backoff_s = 0.0 is not valid: finite seconds >= 0.1"),
        ({"daemon": {"interval_s": 60, "max_backoff_s": 10}}, r"max_backoff_s = 10.0 is below \[daemon\] interval_s = 60.0"),
        ({"daemon": {"sync_interval_s": INF}}, r"sync_interval_s = inf is not valid"),
        ({"slurm": {"timeout_s": 1e-9}}, r"\[slurm\] timeout_s = 1e-09 is not valid: finite seconds >= 1"),
        ({"slurm": {"timeout_s": INF}}, r"\[slurm\] timeout_s = inf is not valid"),
        ({"spool": {"max_age_s": INF}}, r"\[spool\] max_age_s = inf is not valid: a finite number"),
        ({"scheduler": {"preempt_ratio": 0.5}}, r"\[scheduler\] preempt_ratio = 0.5 must be >= 1"),
        ({"scheduler": {"max_requeues": -1}}, r"\[scheduler\] max_requeues = -1 is not valid: an integer >= 0"),
        ({"scheduler": {"preempt_exempt_s": -1}}, r"\[scheduler\] preempt_exempt_s must be >= 0, got -1.0"),
        (
            {"slurm": {"partitions": [{"name": "h", "accelerator": "h100"}]}},
            r"\[\[slurm.partitions\]\] #1 accelerator = 'h100' is not in the speed table \(k80, p100, v100.*\); "
            r"for a type without a profile give relative_speed",
        ),
        (
            {"slurm": {"partitions": [{"name": "n", "accelerator": "npu", "relative_speed": 0.8, "relative_to": "x1"}]}},
            r"#1 relative_to = 'x1' is not in the speed table",
        ),
        (
            {"slurm": {"partitions": [{"name": "n", "accelerator": "npu", "relative_speed": 0}]}},
            r"#1 relative_speed = 0.0 is not valid: a finite factor > 0",
        ),
        ({"slurm": {"partitions": [{"name": "n", "accelerator": "npu", "relative_speed": INF}]}}, r"relative_speed = inf"),
    ],
)
def test_values_that_would_stop_the_daemon_are_clear_errors(document, message):
    with pytest.raises(ConfigError, match=message):
        parse_config(document, {}, source="test.toml")


def test_environment_values_are_checked_the_same_way():
    with pytest.raises(ConfigError, match=r"\[daemon\] interval_s = inf is not valid"):
        parse_config({}, {"ASRPT_DAEMON_INTERVAL_S": "inf"}, source="test.toml")


def test_a_missing_slurm_conf_is_an_error(tmp_path):
    with pytest.raises(ConfigError, match=r"\[slurm\] slurm_conf = '.*absent.conf' is not a file"):
        parse_config({"slurm": {"slurm_conf": str(tmp_path / "absent.conf")}}, {}, source="test.toml")
    conf = tmp_path / "slurm.conf"
    conf.write_text("ClusterName=x\n")
    assert parse_config({"slurm": {"slurm_conf": str(conf)}}, {}).slurm.slurm_conf == str(conf)


@pytest.mark.parametrize("bind", ["0.0.0.0:8787", "[::]:8787", "0.0.0.0:0"])
def test_binding_every_interface_warns(bind, caplog):
    with caplog.at_level("WARNING", logger="asrpt.daemon.config"):
        config = parse_config({"daemon": {"http_bind": bind}}, {}, source="test.toml")
    assert config.daemon.http_bind == bind
    assert "listens on every network interface" in caplog.text and "README-http.md" in caplog.text


@pytest.mark.parametrize("bind", ["", "127.0.0.1:8787", "8787", ":8787", "[::1]:8787"])
def test_binding_locally_does_not_warn(bind, caplog):
    with caplog.at_level("WARNING", logger="asrpt.daemon.config"):
        parse_config({"daemon": {"http_bind": bind}}, {}, source="test.toml")
    assert caplog.text == ""


def test_environment_overrides_the_file(tmp_path):
    path = tmp_path / "asrpt.toml"
    path.write_text(
        '[daemon]\ninterval_s = 60\n[database]\nurl = "sqlite:///a.db"\n'
        '[slurm]\ntimeout_s = 9\naccelerator_gres = ["gpu"]\n'
        '[[slurm.partitions]]\nname = "npu"\naccelerator = "910b"\nrelative_speed = 0.8\n'
    )
    config = load_config(
        path, environ={"ASRPT_DAEMON_INTERVAL_S": "5", "ASRPT_DATABASE_URL": "sqlite:///b.db", "ASRPT_SLURM_USE_SACCT": "true"}
    )
    assert config.daemon.interval_s == 5.0
    assert config.database.url == "sqlite:///b.db"
    assert config.partitions[0].relative_speed == 0.8
    assert config.slurm.partitions[0].accelerator == "910b"
    assert config.slurm.timeout_s == 9.0 and config.slurm.accelerator_gres == ("gpu",) and config.slurm.use_sacct is True


def test_unreadable_toml_names_the_file(tmp_path):
    path = tmp_path / "asrpt.toml"
    path.write_text("[daemon\n")
    with pytest.raises(ConfigError, match="asrpt.toml: cannot read"):
        load_config(path, environ={})


def test_serving_plans_one_path_a_list_or_the_environment(tmp_path):
    assert parse_config({}, {}).serving.plan == ()
    one = parse_config({"serving": {"plan": "/etc/asrpt/llama2-7b.json"}}, {})
    assert one.serving.plan == ("/etc/asrpt/llama2-7b.json",)
    several = parse_config({"serving": {"plan": ["/etc/asrpt/a.json", "/etc/asrpt/plans"]}}, {})
    assert several.serving.plan == ("/etc/asrpt/a.json", "/etc/asrpt/plans")
    env = parse_config({"serving": {"plan": "/x.json"}}, {"ASRPT_SERVING_PLAN": "/a.json,/b.json"})
    assert env.serving.plan == ("/a.json", "/b.json")


def test_a_partition_may_name_its_serving_accelerator():
    config = parse_config(
        {"slurm": {"partitions": [{"name": "a100", "accelerator": "a100", "serving_accelerator": "A100-40GB"},
                                  {"name": "t4", "accelerator": "t4"}]}},
        {},
    )
    assert [p.serving_accelerator for p in config.partitions] == ["A100-40GB", None]


def test_the_daemon_predicts_with_the_forest_defaults_and_can_restore_the_paper():
    from asrpt.core.prediction import DEFAULT_RF_ESTIMATE, DEFAULT_RF_UNSEEN_POLICY, DEFAULT_RF_UNSEEN_REFERENCE
    from asrpt.daemon.service import policy_options

    sched = parse_config({}, {}).scheduler
    assert (sched.unseen_policy, sched.unseen_reference, sched.estimate) == (
        DEFAULT_RF_UNSEEN_POLICY, DEFAULT_RF_UNSEEN_REFERENCE, DEFAULT_RF_ESTIMATE)
    assert policy_options(parse_config({}, {})).time_limit_cap is True
    paper = parse_config({"scheduler": {"unseen_policy": "zero", "unseen_reference": "history", "time_limit_cap": False}}, {})
    assert paper.scheduler.unseen_policy == "zero" and policy_options(paper).time_limit_cap is False
    with pytest.raises(ConfigError, match="estimate = 'mode' is not one of median, mean, lognormal"):
        parse_config({"scheduler": {"estimate": "mode"}}, {})


def test_http_allowed_hosts_from_the_file_or_the_environment():
    assert parse_config({}, {}).daemon.http_allowed_hosts == ()
    config = parse_config({"daemon": {"http_allowed_hosts": ["queue.example.org", "Queue.Example.org:443"]}}, {})
    assert config.daemon.http_allowed_hosts == ("queue.example.org", "Queue.Example.org:443")
    from_env = parse_config({}, {"ASRPT_DAEMON_HTTP_ALLOWED_HOSTS": "a.example.org, b.example.org"})
    assert from_env.daemon.http_allowed_hosts == ("a.example.org", "b.example.org")
