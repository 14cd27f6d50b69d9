-- Sluice rate limiter, one EVALSHA per request (or per batch: parts/layout.lua, "Batch"):
-- every tier of every identifier is checked, and only if all admit is the cost committed to
-- each. The semantics are limit::decide()'s (src/limit/decide.cpp), whose check and commit
-- functions the ones here mirror; the differential test (tests/store/test_redis_script.cpp)
-- runs both on random traces.
--
-- KEYS, per identifier in request order: its HASH, then one ZSET per `log` tier of it in tier
--   order (src/store/redis_script.cpp builds every name).
-- ARGV: [1] time override in µs ("" in production: the clock is TIME), [2] cost,
--   [3] number of identifiers, then per identifier its number of tiers n and n times 11
--   values: algorithm (f fixed | m fixed by calendar month | s sliding | g gcra | l log |
--   c concurrency), limit, per_us (c: the lease), bucket_us, buckets, burst (f, m: the window
--   offset in µs; c: the request's lease id, 0 for none), interval_us, tolerance_us,
--   min_interval_us, horizon_us, tier id.
-- Reply: { allowed (0|1), retry_after_us, then per tier in request order: remaining,
--   reset_us, admitted (0|1) }, and with flag 'u' or 'U' (parts/layout.lua) an admission's
--   receipt: per identifier the instant its commit used. retry_after and reset count from the
--   caller's clock, even where the decision was made at a key's later "@t".
--   Mode undo (parts/undo.lua) takes an admission back by its receipt.
-- HASH fields (times in µs of Unix time):
--   "@t"       the latest time a commit used: the key's clock never goes back before it
--   "@e"       the HASH's expiry in ms, as this script last set it
--   <tier id>  "<last>;<state>", <last> the tier's latest admission, and <state>:
--     fixed, sliding  "<total>|<newest>/<first>": <newest> the count of the bucket of <last>
--                     (index floor((last + offset) / bucket), or the calendar month of
--                     last + offset as year * 12 + month - 1), <total> the sum of every count,
--                     <first> the index of the oldest older bucket; the older non-empty
--                     buckets, oldest first, are in field "<tier id>|o" as
--                     "<index>:<count>,<index>:<count>,...", written only when they change
--                     (most requests fall in the newest bucket: they read and write the head
--                     alone). Without an older bucket: "|<newest>|" (and "|o" is stale).
--                     A <newest> of 0 (taken back, or a commit of cost 0) is no bucket.
--     gcra            "<tat - last>"
--     log             "<the ZSET's expiry in ms as last set here>" (0: no ZSET); the ZSET
--                     holds the admitted times: score <ts>, member "<ts>:<seq>", seq from 1
--                     per ts, with no gap (a take-back removes the highest)
--     concurrency     "<lease id>:<expiry>," per request in flight, oldest first
--   <tier id>|m  (a tier with min_interval) "<last>" of an admission taken back whole (mode
--              undo writes it): while the tier's <last> is that, it marks nothing; the next
--              commit that passes by it empties it. A new field, not a new format: a script
--              that does not know it reads the mark as it stands (refusing until min_interval
--              passes, as before this field).
-- Storage format. The version is in the data, field by field (a tier's field is read and written
-- alone, and tiers of several policies share an identifier's HASH, so one version per HASH could
-- not say which fields a newer script has rewritten): the fields above are format 1, written
-- with no mark (each starts with a digit); a later format of a field starts with "v<N>:", which
-- no reader of format 1 matches (it fails or reads no state: never mistaken for format 1). A
-- tier's "|o" field is of its head's format. A change of format ships in two releases, so that a
-- fleet upgraded one gateway at a time never runs a script beside data it cannot read: release
-- R reads both formats and writes the old one; R+1 writes the new one and still reads the old;
-- R+2 drops the old reader. A reader is thus kept for one release after the last release that
-- wrote its format, and a format no release wrote (one changed again before a release: releases
-- are the git tags v*) gets no reader: the inline older buckets "<total>|<newest>|<list>" of
-- 8403d16 and the formats of 9ea58a7 were never released, and their readers are gone.
-- A commit keeps each key alive for its longest horizon past max(time used, clock); a TTL
-- only grows, and when it must, with horizon / 8 of slack, so that a busy key is not
-- extended on every request. A batch writes a HASH once, at its end: one HSET of every field
-- its commits changed (its requests on one key read the ones before them from the script's
-- memory).
--
-- Cost (this runs on every request; bench/lua_bench.sh measures it): redis.call is dearest, then
-- allocations (strings, tables, and closures: every `local function` below is made anew on each
-- call, and each local of this chunk it captures is one more object: a function capturing 15
-- locals cost 0.6 µs per call, measured), then number <-> string conversions and pattern
-- matches. So the functions take values, not tables, and capture nothing but read_field (they
-- reach library functions through the globals); the modes and the steps of a decision (an
-- identifier, a tier, a commit) are parts spliced in at build time where they run, not Lua
-- functions; steps of a few lines (gcra's commit, the min_interval check, a TTL's extension)
-- are written where they are used; an ARGV
-- number is converted where it is used, common values ("0", "1") compared as strings first; a
-- stored string is reused where it can be (a field's <last> is most often "@t"); numbers are
-- written with string.format('%d') (`..` of a number is %.14g). Every number here is an integer
-- below 2^53, so a % b is exact and (a - a % b) / b is floor division, without math.floor's C call.

-- Parts. This file is assembled at build time (cmake/embed_lua.cmake) into the one script that
-- is embedded and loaded: each "-- #include" line is replaced by its file from parts/, indented
-- as the line. Each part says what it holds and which function of decide.cpp it mirrors:
--   fields.lua       read_field: a HASH field, also from a batch's memory
--   buckets.lua      check_buckets, commit_buckets: fixed, sliding and month tiers
--   gcra.lua         check_gcra
--   log.lua          check_log, commit_log
--   concurrency.lua  check_concurrency
--   undo.lua         mode undo: an admission taken back (take_back)
--   lease.lua        modes release and renew
--   admin.lua        modes reset and control: the admin API's (DELETE /identities, blocks, overrides)
--   layout.lua       decode a call's layout: a single check, or a batch checked whole first,
--     tier_layout.lua  an identifier's tiers as laid out (also for mode undo)
--   decide.lua       modes check and batch: each request decided in turn (decide()), with
--     identifier.lua   an identifier's fields, clock and tiers (check_all)
--     tier.lua         one tier (check_tier), with calendar.lua for month tiers
--     commit.lua       an identifier's commit (commit_all)
--   batch.lua        the end of a batch: one HSET per HASH
-- bench/lua_bench.sh assembles the script the same way.

-- #include parts/fields.lua

-- #include parts/buckets.lua

-- #include parts/gcra.lua

-- #include parts/log.lua

-- #include parts/concurrency.lua

local call, fmt, match = redis.call, string.format, string.match
local ARGV, KEYS = ARGV, KEYS
local ERR = 'ERR sluice rate_limit: '

-- #include parts/undo.lua

-- #include parts/lease.lua

-- #include parts/admin.lua

-- #include parts/layout.lua
-- #include parts/decide.lua
-- #include parts/batch.lua
return batch or out
