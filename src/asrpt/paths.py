"""Where asrpt keeps things on a host by default (DESIGN.md section 7), in one light module
that entry points can import without pulling in SQLAlchemy or scikit-learn."""

DEFAULT_CONFIG_PATH = "/etc/asrpt/asrpt.toml"
DEFAULT_STATE_DIR = "/var/lib/asrpt"
DEFAULT_DATABASE_URL = "sqlite:////var/lib/asrpt/asrpt.db"
DEFAULT_SPOOL_DIR = "/var/spool/asrpt"
#: asrptd's Unix socket: every user's ``asrpt queue/eta/explain`` (systemd's RuntimeDirectory).
DEFAULT_SOCKET_PATH = "/run/asrpt/asrptd.sock"
