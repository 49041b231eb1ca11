-- bench_fanin.py's load through wrk (Debian's `wrk`, C and one epoll loop: on a 2-core machine it leaves the
-- server nearly both cores, where the Python generator takes most of one).
--
--   wrk -t1 -c<clients> -d<seconds>s --timeout 10s -s bench/fanin_wrk.lua http://127.0.0.1:<port> -- <file> <ms> <n>
--
-- <file>: every request body of the run, built by bench_fanin.py in the order they are sent (round by round, client
-- by client), each behind its length as 4 bytes big-endian. <ms>: the pause between a connection's answer and its
-- next batch. <n>: the connections, whose first batches are spread over the first interval (a job's processes are
-- not in lockstep). One thread: its connections take the bodies in turn, so each client's batch goes once a round.
-- done() prints one JSON line that bench_fanin.py reads.

local requests = {}
local position = 0
local interval_ms = 1000
local first_delays_left = 0

function init(args)
  local f = assert(io.open(args[1], "rb"))
  local data = f:read("*a")
  f:close()
  interval_ms = tonumber(args[2])
  first_delays_left = tonumber(args[3])
  local i = 1
  while i <= #data do
    local a, b, c, d = string.byte(data, i, i + 3)
    local length = ((a * 256 + b) * 256 + c) * 256 + d
    local headers = { ["Content-Type"] = "application/json", ["Content-Encoding"] = "gzip" }
    requests[#requests + 1] = wrk.format("POST", "/api/v1/ingest", headers, string.sub(data, i + 4, i + 3 + length))
    i = i + 4 + length
  end
end

-- wrk asks before every request of a connection, its first included: the first one per connection is spread
function delay()
  if first_delays_left > 0 then
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
