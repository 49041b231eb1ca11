-- bench_fanin.py's load through wrk (Debian's `wrk`, C and one epoll loop: on a 2-core machine it leaves the
-- server nearly both cores, where the Python generator takes most of one).
--
--   wrk -t1 -c<clients> -d<seconds>s --timeout 10s -s bench/fanin_wrk.lua http://127.0.0.1:<port> -- <file> <ms> <n> [cadence]
--
-- <file>: every request body of the run, built by bench_fanin.py in the order they are sent (round by round, client
-- by client), each behind its length as 4 bytes big-endian. <ms>: a client's interval. <n>: the connections. One
-- thread: its connections take the bodies in turn, so each client's batch goes once a round.
-- [cadence]: when the batches go.
--   "fixed" (the default): <n> clients at one batch every <ms> each, at phases of their own, whatever the answers'
--     latency: every round of <ms> has <n> send times drawn uniformly at random (random phases, so some moments are
--     busier than others, as a job's processes are), and the next connection to ask takes the next one (or goes at
--     once when that time has passed: a late answer makes the next batch late, never a burst later). This is what a
--     training process does (its data comes at its own step's pace; the client sends it within its linger) and
--     what bench_fanin.py's Python generator does (each client's next batch an interval after the previous one's
--     time). wrk keeps no state per connection, so the send times are the whole load's, not a connection's own.
--   "after-answer": each connection pauses <ms> after its answer (the first batches spread over the first <ms>):
--     a closed loop whose period is the interval plus the latency. Answers released together by one commit come
--     back together a second later, so the load bunches itself up behind any stall (a harsher load than clients
--     keep; kept to compare with earlier figures).
-- done() prints one JSON line that bench_fanin.py reads.

local ffi = require("ffi")  -- (Debian's wrk is built on LuaJIT) a monotonic clock in ms, which wrk's Lua has none of
ffi.cdef [[
typedef struct { long tv_sec; long tv_nsec; } rli_timespec;
int clock_gettime(int clock_id, rli_timespec *tp);
]]
local timespec = ffi.new("rli_timespec")
local function now_ms()
  ffi.C.clock_gettime(1, timespec)  -- CLOCK_MONOTONIC
  return tonumber(timespec.tv_sec) * 1000 + tonumber(timespec.tv_nsec) / 1e6
end

local requests = {}
local position = 0
local interval_ms = 1000
local clients = 0
local first_delays_left = 0
local cadence = "fixed"
local send_at = {}  -- "fixed": this round's send times (ms, sorted), taken in turn
local taken = 0
local round_start = nil

function init(args)
  local f = assert(io.open(args[1], "rb"))
  local data = f:read("*a")
  f:close()
  interval_ms = tonumber(args[2])
  clients = tonumber(args[3])
  first_delays_left = clients
  cadence = args[4] or "fixed"
  assert(cadence == "fixed" or cadence == "after-answer", "cadence: fixed or after-answer, not " .. cadence)
  local i = 1
  while i <= #data do
    local a, b, c, d = string.byte(data, i, i + 3)
    local length = ((a * 256 + b) * 256 + c) * 256 + d
    local headers = { ["Content-Type"] = "application/json", ["Content-Encoding"] = "gzip" }
    requests[#requests + 1] = wrk.format("POST", "/api/v1/ingest", headers, string.sub(data, i + 4, i + 3 + length))
    i = i + 4 + length
  end
end

local function next_send_at()
  if taken >= #send_at then  -- a new round: <n> send times at random phases within it
    round_start = round_start and round_start + interval_ms or now_ms()
    send_at = {}
    for i = 1, clients do
      send_at[i] = round_start + math.random() * interval_ms
    end
    table.sort(send_at)
    taken = 0
  end
  taken = taken + 1
  return send_at[taken]
end

-- wrk asks before every request of a connection, its first included
function delay()
  if cadence == "fixed" then
    local wait = next_send_at() - now_ms()
    return wait > 0 and math.floor(wait) or 0
  end
  if first_delays_left > 0 then  -- after-answer: the first one per connection is spread
    first_delays_left = first_delays_left - 1
    return math.random(0, interval_ms - 1)
  end
  return interval_ms
end

function request()
  position = position % #requests + 1
  return requests[position]
end

function done(summary, latency, requests)
  local e = summary.errors
  io.write(string.format(
    '{"requests": %d, "duration_us": %d, "p50_us": %d, "p99_us": %d, "max_us": %d, "connect": %d, "read": %d, ' ..
    '"write": %d, "status": %d, "timeout": %d}\n',
    summary.requests, summary.duration, latency:percentile(50), latency:percentile(99), latency.max,
    e.connect, e.read, e.write, e.status, e.timeout))
end
