--[[
asrpt job_submit.lua: record every submission (sbatch, srun, salloc; wrapper or not) for asrptd.

slurmctld runs slurm_job_submit() below for each new job, with the submitting uid it
authenticated itself (no user can forge it) and the whole request, batch script included.
For each submission this script

  1. optionally (SET_PRIORITY, off by default) gives a job whose priority nobody set the
     priority NEW_JOB_PRIORITY, below asrptd's band, so that a job submitted between two
     scheduling cycles queues behind the jobs asrptd has ordered instead of overtaking them;
     and (FIRST_LOOK_S) lets a batch job Slurm could split across nodes wait a bounded time
     for asrptd's first look (a begin time FIRST_LOOK_S ahead, "asrpt-look" in AdminComment);
  2. writes one JSON record into SPOOL_DIR, atomically (a hidden temp file, then os.rename);
  3. puts "asrpt-rec:<token>" at the front of the job's AdminComment (keeping any text that
     was there), the same token as in the record: asrptd reads AdminComment from squeue and
     so learns exactly which Slurm job id a record belongs to (the id does not exist yet
     while this script runs).

It never rejects, delays or changes a submission because of its own trouble: every step runs
inside pcall, a failure is logged with slurm.log_info (rate-limited) and slurm.SUCCESS is
returned. The work is bounded: no subprocess, no network, no database, no waiting; at most
HASH_LIMIT bytes of the script are hashed and SCRIPT_TEXT_LIMIT bytes copied, and at most
HEADER_LINE_LIMIT lines are scanned for #ASRPT directives. slurm_job_modify passes through.

slurmctld holds its job lock while this runs, so a write that waits for a disk stops all of
Slurm, and sbatch gives up after 10 s ("Socket timed out") although its job exists. Lua 5.1
has no non-blocking or timed file I/O, so the script writes only to a memory file system
(MEMORY_FS_ONLY) and stops writing for PAUSE_S after a slow write. A record it does not write
is dropped: the job goes through untagged, the drop is counted in SPOOL_DIR/.status (when
that is safe to write) and in the rate-limited log line.

Works with the Lua 5.1 of Debian's job_submit_lua.so (Slurm 22.05 and 24.11) and needs only
Lua's standard io/os/string/math libraries; written so that Lua 5.2-5.4 run it unchanged.
Install notes: contrib/slurm/README-job_submit.md. The daemon side:
src/asrpt/ingest/plugin_spool.py.

Record (format "asrpt-plugin-submission", version 1), one file "<epoch>-<token>.json":
  {"format":"asrpt-plugin-submission","version":1,"source":"plugin","plugin_version":"1",
   "token":"<20 hex>","submit_time_s":<os.time()>,
   "submit_uid":<uid slurmctld authenticated>,"uid":<job's user id>,"gid":<group id>,
   "user":"alice"|null,"account":..,"name":..,"partition":"a,b"|null,"qos":..,"work_dir":..,
   "tres_per_node":"gres:gpu:a100:2"|null,"tres_per_job":..,"tres_per_task":..,
   "tres_per_socket":..,        -- 22.05 writes "gres:gpu:2", 24.11 "gres/gpu:2"
   "min_nodes":N|null,"max_nodes":..,"num_tasks":..,"cpus_per_task":..,
   "time_limit_min":N|null,"time_limit_unlimited":false,
   "array":"0-9%2"|null,"het_job_offset":N|null,"interactive":false|true|null,
   "priority_set":N|null,       -- what option 1 set, else null
   "script":null | {"bytes":N,"hash_alg":"poly31x37","hash":"<16 hex>","hash_bytes":N,
                    "text":"<first SCRIPT_TEXT_LIMIT bytes>","truncated":false},
   "asrpt_directives":["model=llama-7b","parallel=2x1x4", ...]}
Unset numbers (Slurm's NO_VAL) are null. Strings are the bytes Slurm has; JSON escapes only
what JSON requires, so a script that is not UTF-8 stays byte-exact (the daemon decodes with
surrogateescape). "script" is null for srun/salloc ("interactive" is true) and for the
components after the first of a heterogeneous batch job ("interactive" is null: unknown).

The script hash ("poly31x37", see poly31x37 below) covers the first "hash_bytes" bytes. It is
a recurrence-group key, not a security boundary; when the record holds the whole script the
daemon hashes the text with sha256 itself, as the wrapper does.
--]]

-- ---- settings ------------------------------------------------------------------------------
-- Directory the records go to: a memory file system (a dedicated, size-limited tmpfs), owned by
-- SlurmUser (root here), mode 0700, created at boot (this script cannot create directories).
-- Give the real path (no symlink in it). asrptd reads it ([spool] plugin_dir).
-- contrib/slurm/testbed/up.sh rewrites this line for its test-bed.
local SPOOL_DIR = "/run/asrpt-plugin"
-- true: write only when SPOOL_DIR is on tmpfs or ramfs (checked in /proc/self/mountinfo every
-- FS_CHECK_INTERVAL_S). A write to a disk file system can block slurmctld for as long as the
-- disk stalls (fsfreeze for a snapshot, a failing disk, NFS), and slurmctld answers no RPC
-- meanwhile; tmpfs never waits for a disk and cannot be frozen. false: write anywhere (the
-- pause below then limits, but cannot prevent, stalls).
local MEMORY_FS_ONLY = true
local FS_CHECK_INTERVAL_S = 60
-- A record write that took SLOW_WRITE_S or more (wall clock, whole seconds: Lua has no finer
-- one) stops writing for PAUSE_S, so a slow spool slows at most one submission per pause.
local SLOW_WRITE_S = 2
local PAUSE_S = 300
-- true: a job whose priority nobody set (not held, no --priority) starts at NEW_JOB_PRIORITY,
-- below asrptd's band [slurm] priority_floor..priority_ceiling, until asrptd orders it.
-- Must stay >= 1: priority 0 means held.
local SET_PRIORITY = false
local NEW_JOB_PRIORITY = 1
-- Seconds a new batch job that Slurm could split across nodes waits for asrptd's first look
-- (0: off). Without it Slurm may start a communication-heavy job split over two nodes before
-- asrptd's next cycle sees it, when asrptd would have held it for one node. Such a job gets
-- begin time now + FIRST_LOOK_S and "asrpt-look" in its AdminComment; asrptd's first cycle
-- that sees it makes it eligible at once (or holds it). A stopped daemon holds nothing: Slurm
-- starts the job at the begin time anyway. Keep it above asrptd's [daemon] interval_s.
-- Only a job whose accelerators may spread (--gpus or --gpus-per-task, more than one, and
-- not -N 1) and that set no begin time of its own gets it; srun/salloc never wait.
local FIRST_LOOK_S = 60
local ACCELERATOR_GRES = {gpu = true, npu = true}
-- Bytes of the batch script copied into the record, hashed, and scanned for #ASRPT lines.
local SCRIPT_TEXT_LIMIT = 65536
local HASH_LIMIT = 65536
local HEADER_LINE_LIMIT = 1000
-- false: do not look up the user name (a passwd lookup; the daemon resolves the uid itself).
local RECORD_USER_NAME = true
-- Seconds between two log lines about failures (the others are counted into the next line).
local LOG_INTERVAL_S = 60

-- ---- constants -----------------------------------------------------------------------------
local FORMAT = "asrpt-plugin-submission"
local FORMAT_VERSION = 1
local PLUGIN_VERSION = "1"
local TAG = "asrpt-rec:"
local LOOK_TAG = "asrpt-look"
local NO_VAL = 4294967294     -- Slurm's "not set" for 32-bit fields
local INFINITE = 4294967295
local NO_VAL16 = 65534
local MAX_STRING = 4096       -- longest single string field recorded (the script aside)
local MAX_WORDS = 256         -- #ASRPT words kept
local MAX_WORD = 256

local SUCCESS = (slurm and slurm.SUCCESS) or 0
local floor, byte, sub, find, format = math.floor, string.byte, string.sub, string.find, string.format

-- ---- logging (rate-limited) ----------------------------------------------------------------
local last_log_s, suppressed = -1e18, 0

local function note(message)
  local now = os.time()
  if now - last_log_s < LOG_INTERVAL_S then
    suppressed = suppressed + 1
    return
  end
  local text = "asrpt job_submit.lua: " .. tostring(message)
  if suppressed > 0 then
    text = text .. format(" (and %d more problems in the last %d s)", suppressed, now - last_log_s)
  end
  last_log_s, suppressed = now, 0
  pcall(slurm.log_info, "%s", text)
end

-- ---- the script hash ("poly31x37") ----------------------------------------------------------
-- Two polynomial hashes of the bytes b1..bn, h1 = sum(b_i * 31^(n-i)) mod 4294967291 and
-- h2 = sum(b_i * 37^(n-i)) mod 4294967279 (the two largest primes below 2^32), as 8 + 8 hex digits.
-- Lua 5.1 has only doubles: four bytes are folded per step (h * 31^4 + ... stays below 2^53,
-- so every step is exact). About 0.07 us per byte here, 3.5 times faster than FNV-1a in
-- double arithmetic; a recurrence-group key, not a security boundary.
local P1, P2 = 4294967291, 4294967279
local T32, T24 = 4294967296, 16777216

local function poly31x37(s, n)
  local h1, h2, i = 0, 0, 1
  while i + 3 <= n do
    local a, b, c, d = byte(s, i, i + 3)
    h1 = (h1 * 923521 + a * 29791 + b * 961 + c * 31 + d) % P1
    h2 = (h2 * 1874161 + a * 50653 + b * 1369 + c * 37 + d) % P2
    i = i + 4
  end
  while i <= n do
    local a = byte(s, i)
    h1 = (h1 * 31 + a) % P1
    h2 = (h2 * 37 + a) % P2
    i = i + 1
  end
  return format("%08x%08x", h1, h2)
end

-- ---- JSON ----------------------------------------------------------------------------------
local ESCAPES = {['"'] = '\\"', ['\\'] = '\\\\', ['\n'] = '\\n', ['\r'] = '\\r', ['\t'] = '\\t'}
for c = 0, 31 do
  local ch = string.char(c)
  if not ESCAPES[ch] then ESCAPES[ch] = format("\\u%04x", c) end
end
ESCAPES[string.char(127)] = "\\u007f"

local function json_string(s)
  return '"' .. (string.gsub(s, '[%c"\\]', ESCAPES)) .. '"'
end

local Raw = {}  -- marks an already encoded JSON value

local function json(v)
  local kind = type(v)
  if v == nil then
    return "null"
  elseif kind == "boolean" then
    return v and "true" or "false"
  elseif kind == "number" then
    if v ~= v or v == math.huge or v == -math.huge then return "null" end
    if v == floor(v) and v > -9007199254740992 and v < 9007199254740992 then return format("%.0f", v) end
    return format("%.17g", v)
  elseif kind == "string" then
    return json_string(v)
  elseif kind == "table" and v[1] == Raw then
    return v[2]
  end
  error("cannot encode a " .. kind)
end

-- fields: list of {key, value}; a nil value is written as null.
local function json_object(fields)
  local parts = {}
  for i = 1, #fields do
    parts[i] = json_string(fields[i][1]) .. ":" .. json(fields[i][2])
  end
  return {Raw, "{" .. table.concat(parts, ",") .. "}"}
end

local function json_array(values)
  local parts = {}
  for i = 1, #values do parts[i] = json(values[i]) end
  return {Raw, "[" .. table.concat(parts, ",") .. "]"}
end

-- ---- job_desc values -----------------------------------------------------------------------
local function text(v)
  if type(v) ~= "string" or v == "" then return nil end
  if #v > MAX_STRING then return sub(v, 1, MAX_STRING) end
  return v
end

local function count32(v)  -- a uint32 field; NO_VAL/INFINITE -> nil
  if type(v) ~= "number" or v >= NO_VAL or v < 0 then return nil end
  return v
end

local function count16(v)  -- a uint16 field; NO_VAL16/INFINITE16 -> nil
  if type(v) ~= "number" or v >= NO_VAL16 or v < 0 then return nil end
  return v
end

local function field(job_desc, name)  -- a field some Slurm versions may lack: nil, never an error
  local ok, value = pcall(function() return job_desc[name] end)
  if ok then return value end
  return nil
end

-- #ASRPT words of the script header, by sbatch's rules for #SBATCH: from column 0, before the
-- first line that is neither blank nor a comment (the shebang is a comment line). Words are
-- split at whitespace and end at an unquoted "#"; quoting is left to the daemon, which re-parses
-- the script text when the record holds all of it.
local SPACE = {[9] = true, [10] = true, [11] = true, [12] = true, [13] = true, [32] = true}

local function asrpt_words(script)
  local words = {}
  local n = #script
  local limit = n < SCRIPT_TEXT_LIMIT and n or SCRIPT_TEXT_LIMIT
  local pos, lines = 1, 0
  while lines < HEADER_LINE_LIMIT do
    local first = find(script, "%S", pos)  -- skips blank lines too
    if not first or first > limit or byte(script, first) ~= 35 then break end  -- 35: "#"
    local stop = find(script, "\n", first, true) or (n + 1)
    lines = lines + 1
    if (first == 1 or byte(script, first - 1) == 10) and sub(script, first, first + 5) == "#ASRPT"
        and (first + 6 >= stop or SPACE[byte(script, first + 6)]) then
      for word in string.gmatch(sub(script, first + 6, stop - 1), "%S+") do
        if byte(word, 1) == 35 or #words >= MAX_WORDS then break end
        words[#words + 1] = sub(word, 1, MAX_WORD)
      end
    end
    pos = stop + 1
  end
  return words
end

-- ---- token ---------------------------------------------------------------------------------
local counter = 0
pcall(math.randomseed, floor(os.time() + (os.clock() * 1000000) % 1000000))

-- 20 lowercase hex digits: 80 random bits from /dev/urandom; without it, time + counter + PRNG.
local function new_token()
  counter = counter + 1
  local f = io.open("/dev/urandom", "rb")
  if f then
    local data = f:read(10)
    f:close()
    if data and #data == 10 then
      return (string.gsub(data, ".", function(c) return format("%02x", byte(c)) end))
    end
  end
  return format("%08x%06x%06x", os.time() % T32, counter % T24, math.random(0, T24 - 1))
end

-- ---- the record ----------------------------------------------------------------------------
local function build_record(job_desc, submit_uid, token, now, priority_set)
  local script = field(job_desc, "script")
  local script_json, words = nil, {}
  if type(script) == "string" then
    local n = #script
    local hashed = n < HASH_LIMIT and n or HASH_LIMIT
    script_json = json_object({
      {"bytes", n},
      {"hash_alg", "poly31x37"},
      {"hash", poly31x37(script, hashed)},
      {"hash_bytes", hashed},
      {"text", n > SCRIPT_TEXT_LIMIT and sub(script, 1, SCRIPT_TEXT_LIMIT) or script},
      {"truncated", n > SCRIPT_TEXT_LIMIT},
    })
    words = asrpt_words(script)
  end
  local user = nil
  if RECORD_USER_NAME then user = text(field(job_desc, "user_name")) end
  local limit = field(job_desc, "time_limit")
  local het = count32(field(job_desc, "het_job_offset"))
  -- srun/salloc send no script; neither do the components after the first of a batch
  -- heterogeneous job (only component 0 carries it), so for those it is unknown (null).
  local interactive = type(script) ~= "string"
  if interactive and het ~= nil and het > 0 then interactive = nil end
  return json(json_object({
    {"format", FORMAT},
    {"version", FORMAT_VERSION},
    {"source", "plugin"},
    {"plugin_version", PLUGIN_VERSION},
    {"token", token},
    {"submit_time_s", now},
    {"submit_uid", count32(submit_uid)},
    {"uid", count32(field(job_desc, "user_id"))},
    {"gid", count32(field(job_desc, "group_id"))},
    {"user", user},
    {"account", text(field(job_desc, "account"))},
    {"name", text(field(job_desc, "name"))},
    {"partition", text(field(job_desc, "partition"))},
    {"qos", text(field(job_desc, "qos"))},
    {"work_dir", text(field(job_desc, "work_dir"))},
    -- "gres" is the pre-18.08 name of tres_per_node; both versions still answer to it.
    {"tres_per_node", text(field(job_desc, "tres_per_node")) or text(field(job_desc, "gres"))},
    {"tres_per_job", text(field(job_desc, "tres_per_job"))},
    {"tres_per_task", text(field(job_desc, "tres_per_task"))},
    {"tres_per_socket", text(field(job_desc, "tres_per_socket"))},
    {"min_nodes", count32(field(job_desc, "min_nodes"))},
    {"max_nodes", count32(field(job_desc, "max_nodes"))},
    {"num_tasks", count32(field(job_desc, "num_tasks"))},
    {"cpus_per_task", count16(field(job_desc, "cpus_per_task"))},
    {"time_limit_min", count32(limit)},
    {"time_limit_unlimited", limit == INFINITE},
    {"array", text(field(job_desc, "array_inx"))},
    {"het_job_offset", het},
    {"interactive", interactive},
    {"priority_set", priority_set},
    {"script", script_json},
    {"asrpt_directives", json_array(words)},
  }))
end

local function write_record(token, now, payload)
  local stem = SPOOL_DIR .. "/"
  local temp = stem .. ".tmp-" .. token
  local final = stem .. format("%.0f", now) .. "-" .. token .. ".json"
  local f, open_error = io.open(temp, "wb")
  if not f then return nil, "cannot create a record in " .. SPOOL_DIR .. ": " .. tostring(open_error) end
  local written, write_error = f:write(payload)
  local closed, close_error = f:close()
  if not written or not closed then
    os.remove(temp)
    return nil, "cannot write " .. temp .. ": " .. tostring(write_error or close_error)
  end
  local renamed, rename_error = os.rename(temp, final)
  if not renamed then
    os.remove(temp)
    return nil, "cannot rename " .. temp .. ": " .. tostring(rename_error)
  end
  return final
end

-- ---- when writing is safe, and what was dropped ---------------------------------------------------
local loaded_s = os.time()
local written, dropped, dropped_by = 0, 0, {}
local last_drop_s, last_drop_reason = nil, nil
local status_dirty, status_written_s = false, -1e18
local paused_until_s = -1e18
local fs_checked_s, fs_problem = -1e18, nil
local MEMORY_FS = {tmpfs = true, ramfs = true}

-- mountinfo writes space, tab, newline and backslash in paths as \ooo.
local function unescape_mount(path)
  return (string.gsub(path, "\\(%d%d%d)", function(o) return string.char(tonumber(o, 8)) end))
end

-- The type of the file system holding path (its longest enclosing mount point; a later mount on
-- the same point wins), read from procfs, which never waits for a disk.
local function fs_type(path)
  local f, open_error = io.open("/proc/self/mountinfo", "rb")
  if not f then return nil, "cannot read /proc/self/mountinfo: " .. tostring(open_error) end
  local data = f:read("*a")
  f:close()
  local best, best_len = nil, -1
  for line in string.gmatch(data or "", "[^\n]+") do
    local point = string.match(line, "^%S+ %S+ %S+ %S+ (%S+)")
    local kind = string.match(line, " %- (%S+)")
    if point and kind then
      point = unescape_mount(point)
      local n = #point
      if n >= best_len and (point == "/" or path == point or sub(path, 1, n + 1) == point .. "/") then
        best, best_len = kind, n
      end
    end
  end
  if not best then return nil, "no mount point holds it in /proc/self/mountinfo" end
  return best
end

-- nil when a record may be written now, else why not (a short reason and a sentence).
local function unsafe(now)
  if now < paused_until_s and paused_until_s - now <= PAUSE_S then  -- (a clock set back ends it)
    return "paused", format("paused for %d s more after a write that took %d s or more",
                            paused_until_s - now, SLOW_WRITE_S)
  end
  if not MEMORY_FS_ONLY then return nil end
  if now - fs_checked_s >= FS_CHECK_INTERVAL_S or now < fs_checked_s then
    local dir = string.gsub(SPOOL_DIR, "/+$", "")
    local kind, problem = nil, "SPOOL_DIR must be an absolute path"
    if sub(dir, 1, 1) == "/" then kind, problem = fs_type(dir) end
    if kind and MEMORY_FS[kind] then
      fs_problem = nil
    elseif kind then
      fs_problem = format("%s is on %s, not on tmpfs: records are not written there (a stalled disk "
                          .. "would stall slurmctld); mount a tmpfs there or set MEMORY_FS_ONLY = false",
                          SPOOL_DIR, kind)
    else
      fs_problem = "cannot tell the file system of " .. SPOOL_DIR .. ": " .. tostring(problem)
    end
    fs_checked_s = now
  end
  if fs_problem then return "not_memory_fs", fs_problem end
  return nil
end

local function drop(now, reason, message)
  dropped = dropped + 1
  dropped_by[reason] = (dropped_by[reason] or 0) + 1
  last_drop_s, last_drop_reason, status_dirty = now, reason, true
  note(format("record dropped, %s (%d dropped, %d written since the script loaded)", message, dropped, written))
end

-- SPOOL_DIR/.status: the counters as JSON, rewritten (at most once a second) after a drop, when
-- writing is safe; a failed attempt is retried at the next submission. asrptd's ingest skips
-- dot files.
local function write_status(now)
  if not status_dirty or now == status_written_s or unsafe(now) then return end
  local reasons = {}
  for reason, count in pairs(dropped_by) do reasons[#reasons + 1] = {reason, count} end
  table.sort(reasons, function(a, b) return a[1] < b[1] end)
  local payload = json(json_object({
    {"format", "asrpt-plugin-status"}, {"version", 1}, {"plugin_version", PLUGIN_VERSION},
    {"loaded_s", loaded_s}, {"updated_s", now}, {"written", written}, {"dropped", dropped},
    {"dropped_by", json_object(reasons)}, {"last_drop_s", last_drop_s},
    {"last_drop_reason", last_drop_reason},
    {"paused_until_s", paused_until_s > now and paused_until_s or nil},
  })) .. "\n"
  local temp, final = SPOOL_DIR .. "/.status.new", SPOOL_DIR .. "/.status"
  local f = io.open(temp, "wb")
  if not f then return end
  local ok = f:write(payload)
  if f:close() and ok and os.rename(temp, final) then
    status_dirty, status_written_s = false, now
  else
    os.remove(temp)
  end
end

local function drop_and_report(now, reason, message)  -- a drop while the spool itself is safe
  drop(now, reason, message)
  pcall(write_status, now)
end

local function tag(job_desc, token)
  local old = field(job_desc, "admin_comment")
  if type(old) == "string" and old ~= "" then
    job_desc.admin_comment = TAG .. token .. " " .. old
  else
    job_desc.admin_comment = TAG .. token
  end
end

local function lower_priority(job_desc)
  if not SET_PRIORITY or NEW_JOB_PRIORITY < 1 then return nil end
  -- Held jobs have 0, an admin's --priority is a number: only "not set" is replaced.
  if field(job_desc, "priority") ~= NO_VAL then return nil end
  job_desc.priority = NEW_JOB_PRIORITY
  return NEW_JOB_PRIORITY
end

-- Accelerators a GRES request string asks for in total ("gres:gpu:a100:8", "gres/gpu:8",
-- "gpu:2,npu:1"); 0 when it names none of ACCELERATOR_GRES.
local function accelerators_in(request)
  if type(request) ~= "string" then return 0 end
  local total = 0
  for item in string.gmatch(request, "[^,]+") do
    local name = string.match(item, "^gres[:/]([%w_]+)") or string.match(item, "^([%w_]+)")
    local count = tonumber(string.match(item, "[:=](%d+)$") or "1")
    if name and ACCELERATOR_GRES[name] and count then total = total + count end
  end
  return total
end

local function may_spread(job_desc)
  if type(field(job_desc, "script")) ~= "string" then return false end  -- srun/salloc: a person waits
  local max_nodes = count32(field(job_desc, "max_nodes"))
  if max_nodes == 1 then return false end
  local per_job = accelerators_in(field(job_desc, "tres_per_job"))
  local tasks = count32(field(job_desc, "num_tasks")) or 1
  local per_task = accelerators_in(field(job_desc, "tres_per_task")) * tasks
  return per_job > 1 or per_task > 1
end

local function wait_for_first_look(job_desc, now)
  if FIRST_LOOK_S <= 0 or not may_spread(job_desc) then return false end
  local begin = field(job_desc, "begin_time")
  if type(begin) ~= "number" or begin > now then return false end  -- the user's own --begin
  job_desc.begin_time = now + FIRST_LOOK_S
  local old = field(job_desc, "admin_comment")
  if type(old) == "string" and old ~= "" then
    job_desc.admin_comment = LOOK_TAG .. " " .. old
  else
    job_desc.admin_comment = LOOK_TAG
  end
  return true
end

-- ---- Slurm's entry points ------------------------------------------------------------------
function slurm_job_submit(job_desc, part_list, submit_uid)
  local ok, result = pcall(lower_priority, job_desc)
  local priority_set = nil
  if ok then priority_set = result else note("priority option failed: " .. tostring(result)) end
  ok, result = pcall(wait_for_first_look, job_desc, os.time())
  if not ok then note("first-look option failed: " .. tostring(result)) end

  local now = os.time()
  local reason, why
  ok, reason, why = pcall(unsafe, now)
  if not ok then reason, why = "check_failed", "checking the spool failed: " .. tostring(reason) end
  if reason then
    pcall(drop, now, reason, why)
    return SUCCESS
  end

  local token
  ok, result = pcall(new_token)
  if not ok then
    pcall(drop_and_report, now, "no_token", "no token: " .. tostring(result))
    return SUCCESS
  end
  token = result

  local payload
  ok, result = pcall(build_record, job_desc, submit_uid, token, now, priority_set)
  if not ok then
    pcall(drop_and_report, now, "build_failed", "cannot build the record: " .. tostring(result))
    return SUCCESS
  end
  payload = result

  local path, problem
  ok, path, problem = pcall(write_record, token, now, payload)
  local done_s = os.time()
  if done_s - now >= SLOW_WRITE_S then
    paused_until_s = done_s + PAUSE_S
    note(format("writing a record to %s took %d s or more: not writing for %d s", SPOOL_DIR, done_s - now, PAUSE_S))
  end
  if not ok or not path then
    pcall(drop_and_report, done_s, "write_failed", ok and problem or ("writing the record failed: " .. tostring(path)))
    return SUCCESS
  end
  written = written + 1
  if status_dirty and done_s >= paused_until_s then pcall(write_status, done_s) end

  ok, result = pcall(tag, job_desc, token)
  if not ok then note("cannot set admin_comment: " .. tostring(result)) end
  return SUCCESS
end

function slurm_job_modify(job_desc, job_rec, part_list, modify_uid)
  return SUCCESS
end

return SUCCESS
