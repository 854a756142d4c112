#!/usr/bin/env bash
# Start a throwaway PostgreSQL for asrpt's tests and print the URL to use.
#
#   eval "$(bash contrib/ci/start-postgres.sh /tmp/asrpt-pg)"
#   pytest -m postgres ...
#   bash contrib/ci/start-postgres.sh /tmp/asrpt-pg --stop
#
# Needs Debian's postgresql package (`apt-get install -y postgresql`) and root; installs
# nothing. The cluster lives in DATA_DIR (created, owned by the postgres user), listens on
# 127.0.0.1:${ASRPT_PG_PORT:-5433} only (no Unix socket), and has database asrpt_test owned
# by role asrpt with a random password kept in DATA_DIR, and a login role asrpt_reader with no
# privileges (ASRPT_TEST_POSTGRES_READER_URL; the tests grant it SELECT). Running it again on a running
# cluster just prints the URL. Diagnostics go to stderr; stdout is only the export line.
set -euo pipefail

die() { echo "start-postgres: $*" >&2; exit 1; }

[[ $# -ge 1 ]] || die "usage: $0 DATA_DIR [--stop]"
data_dir=$1
action=${2:-start}
port=${ASRPT_PG_PORT:-5433}
host=127.0.0.1
database=asrpt_test
role=asrpt
reader=asrpt_reader

[[ $(id -u) -eq 0 ]] || die "run as root (initdb and pg_ctl are run as the postgres user)"
id postgres >/dev/null 2>&1 || die "no postgres user: apt-get install -y postgresql"

# Highest installed server version, e.g. /usr/lib/postgresql/15/bin.
bindir=$(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -n 1)
[[ -n $bindir && -x $bindir/initdb ]] || die "no PostgreSQL server binaries under /usr/lib/postgresql: apt-get install -y postgresql"

as_postgres() { runuser -u postgres -- "$@"; }

case $data_dir in /*) ;; *) data_dir=$PWD/$data_dir ;; esac
pgdata=$data_dir/data
password_file=$data_dir/asrpt-password

if [[ $action == --stop ]]; then
    if [[ -f $pgdata/postmaster.pid ]]; then
        as_postgres "$bindir/pg_ctl" -D "$pgdata" -m fast -w stop >&2
    fi
    exit 0
fi
[[ $action == start ]] || die "unknown action $action (use --stop)"

mkdir -p "$data_dir"
chown postgres:postgres "$data_dir"
chmod 700 "$data_dir"
as_postgres test -w "$data_dir" \
    || die "the postgres user cannot write $data_dir (a parent folder is not searchable by it? use a path under /tmp)"

if [[ ! -s $password_file ]]; then
    # Passwords for the superuser (postgres) and for the test role.
    (umask 077; head -c 18 /dev/urandom | base64 | tr -d '/+=' >"$password_file.super")
    (umask 077; head -c 18 /dev/urandom | base64 | tr -d '/+=' >"$password_file")
    chown postgres:postgres "$password_file" "$password_file.super"
fi
if [[ ! -s $password_file.reader ]]; then
    (umask 077; head -c 18 /dev/urandom | base64 | tr -d '/+=' >"$password_file.reader")
    chown postgres:postgres "$password_file.reader"
fi
super_password=$(cat "$password_file.super")
role_password=$(cat "$password_file")
reader_password=$(cat "$password_file.reader")

if [[ ! -f $pgdata/PG_VERSION ]]; then
    echo "start-postgres: initialising a cluster in $pgdata" >&2
    as_postgres "$bindir/initdb" -D "$pgdata" -U postgres --auth=scram-sha-256 \
        --pwfile="$password_file.super" --encoding=UTF8 --locale=C.UTF-8 --no-sync >&2
fi

export PGPASSWORD=$super_password
psql_super() { "$bindir/psql" -X -q -v ON_ERROR_STOP=1 -h "$host" -p "$port" -U postgres -d postgres "$@"; }

if ! as_postgres "$bindir/pg_ctl" -D "$pgdata" status >/dev/null 2>&1; then
    echo "start-postgres: starting on $host:$port" >&2
    # A test server: no Unix socket, no durability (fsync off), loopback only.
    as_postgres "$bindir/pg_ctl" -D "$pgdata" -l "$data_dir/server.log" -w -t 60 start \
        -o "-c listen_addresses=$host -p $port -c unix_socket_directories='' -c fsync=off -c synchronous_commit=off -c full_page_writes=off" >&2 \
        || { tail -n 20 "$data_dir/server.log" >&2 || true; die "server did not start (log: $data_dir/server.log)"; }
fi

for _ in $(seq 1 30); do
    psql_super -c "SELECT 1" >/dev/null 2>&1 && break
    sleep 1
done
psql_super -c "SELECT 1" >/dev/null || die "server on $host:$port does not accept connections"

if [[ $(psql_super -tA -c "SELECT 1 FROM pg_roles WHERE rolname = '$role'") != 1 ]]; then
    psql_super -c "CREATE ROLE $role LOGIN PASSWORD '$role_password'"
fi
if [[ $(psql_super -tA -c "SELECT 1 FROM pg_database WHERE datname = '$database'") != 1 ]]; then
    psql_super -c "CREATE DATABASE $database OWNER $role"
fi
# A login role with no privileges of its own: the tests give it SELECT with `asrpt db grant-reader`.
if [[ $(psql_super -tA -c "SELECT 1 FROM pg_roles WHERE rolname = '$reader'") != 1 ]]; then
    psql_super -c "CREATE ROLE $reader LOGIN PASSWORD '$reader_password'"
fi

echo "export ASRPT_TEST_POSTGRES_URL=postgresql+psycopg://$role:$role_password@$host:$port/$database"
echo "export ASRPT_TEST_POSTGRES_READER_URL=postgresql+psycopg://$reader:$reader_password@$host:$port/$database"
