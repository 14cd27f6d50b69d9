-- Sluice rate limiter, one EVALSHA per request (or per batch of requests: "Batch" below):
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
--   reset_us, admitted (0|1) }. retry_after and reset count from the caller's clock, even
--   where the decision was made at a key's later "@t".
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
--                     alone). Without an older bucket: "|<newest>|" (and "|o" is stale). An
--                     earlier version kept the older buckets inline, "<total>|<newest>|<index>:
--                     <count>,...": such a head is read too, and moved on its next commit (an
--                     earlier script reads a head with "/" as empty, so a fleet half upgraded
--                     counts from the new heads only where the new script runs)
--     gcra            "<tat - last>"
--     log             "<the ZSET's expiry in ms as last set here>" (0: no ZSET); the ZSET
--                     holds the admitted times: score <ts>, member "<ts>:<seq>", seq from 1
--                     per ts
--     concurrency     "<lease id>:<expiry>," per request in flight, oldest first
-- A commit keeps each key alive for its longest horizon past max(time used, clock); a TTL
-- only grows, and when it must, with horizon / 8 of slack, so that a busy key is not
-- extended on every request. A batch writes a HASH once, at its end: one HSET of every field
-- its commits changed (its requests on one key read the ones before them from the script's
-- memory).
--
-- Cost (this runs on every request; bench/lua_bench.sh measures it): redis.call is dearest, then
-- allocations (strings, tables, and closures: every `local function` below is made anew on each
-- call, and each local of this chunk it captures is one more object), then number <-> string
-- conversions and pattern matches. So the functions take values, not tables, and capture nothing
-- but read_field (they reach library functions through the globals); steps of a few lines (gcra's
-- commit, the min_interval check, a TTL's extension) are written where they are used; an ARGV
-- number is converted where it is used, common values ("0", "1") compared as strings first; a
-- stored string is reused where it can be (a field's <last> is most often "@t"); numbers are
-- written with string.format('%d') (`..` of a number is %.14g). Every number here is an integer
-- below 2^53, so a % b is exact and (a - a % b) / b is floor division, without math.floor's C call.

-- A field of `hash` that this batch may have committed (c: the fields known, see "Fields"
-- below; nil outside a batch), read only if it is not known yet; a missing field reads as ''.
local function read_field(c, hash, f)
    local v = c and c[f]
    if not v then
        v = redis.call('HGET', hash, f) or ''
        if c then
            c[f] = v
        end
    end
    return v
end

-- fixed and sliding: `nb` buckets of `bucket` µs, numbered in time shifted by `off` (so
-- fixed windows follow the clock of UTC + off); the window at `at` is the bucket holding `at` and
-- the nb - 1 before it, and a bucket with index i counts until (i + nb) * bucket - off.
-- For a calendar month tier, month_of and month_start (below) are passed: a bucket is then
-- a calendar month of the shifted time (nb is 1).
-- v is the tier's head field (see the header), t_s and t the key's "@t" as stored and as a number.
-- The older buckets are read (field "<id>|o" of `hash`, c its fields: read_field) only when the
-- window moved past the newest bucket or a denial must find when the request fits: most requests
-- touch the head alone. With `soon` (its min_interval not yet passed) an admissible request reports
-- the quota as it stands, as decide.cpp's check with cost 0 does. Returns ok, remaining, reset,
-- admit_at, then what commit_buckets needs if the request is to be committed (admitted, or
-- `always`): the total and the newest count a commit leaves, the index of the oldest older bucket,
-- and the older buckets to write ("<index>:<count>," each, oldest first; nil: the stored ones
-- stand), and last the older field as it was read (nil: not read).
local function check_buckets(v, c, hash, id, t_s, t, at, cost, soon, always, lim, bucket, nb, hz, off,
                              month_of, month_start)
    local sa = at + off  -- in shifted time: a reset is a difference, the same in both
    local cur
    if month_of then
        cur = month_of(sa)
    else
        cur = (sa - sa % bucket) / bucket
    end
    local oldest = cur - nb + 1
    local count = 0
    local first  -- the index of the oldest live bucket (nil: none)
    local newest_live = false  -- the newest stored bucket is cur
    local nw, tot  -- the stored newest count and total ('': no older bucket)
    local src, q  -- the older buckets' list, from q on (nil: not read yet)
    local read  -- the older field as read
    local moved  -- the older list must be written: it changed, or leaves a legacy head
    if v then
        local ls, sep, p, f1
        ls, tot, nw, sep, p, f1 = string.match(v, '^(%d+);(%d*)|(%d+)([|/])()(%d*)')
        if ls then
            if tot ~= '' and sep == '|' then
                src, q, moved = v, p, true  -- a legacy head: its older buckets inline
            end
            local newest = t
            if ls ~= t_s then
                newest = ls + 0
            end
            newest = newest + off
            if month_of then
                newest = month_of(newest)
            else
                newest = (newest - newest % bucket) / bucket
            end
            if newest == cur then
                -- every stored bucket is live (the last commit dropped the others)
                newest_live = true
                if tot == '' then
                    count = nw + 0
                    first = cur
                else
                    count = tot + 0
                    first = f1 + 0
                end
            elseif newest >= oldest then
                -- drop the older buckets that left the window, oldest first
                if tot == '' then
                    count = nw + 0
                else
                    if not src then
                        read = read_field(c, hash, id .. '|o')
                        src, q = read, 1
                    end
                    local find, sub = string.find, string.sub
                    local dead = 0
                    while true do
                        local colon = find(src, ':', q, true)
                        if not colon then
                            break
                        end
                        local idx = sub(src, q, colon - 1) + 0
                        if idx >= oldest then
                            first = idx
                            break
                        end
                        local comma = find(src, ',', colon, true)
                        dead = dead + sub(src, colon + 1, comma - 1)
                        q = comma + 1
                    end
                    count = tot - dead
                end
                first = first or newest
                -- the newest becomes an older bucket
                src, q, moved = string.sub(src or '', q or 1) .. string.format('%d:%s,', newest, nw), 1, true
            elseif tot ~= '' then
                src, q, moved = '', 1, true  -- every bucket left the window
            end
        end
    end

    local remaining = lim - count
    local reset = 0
    if first then
        if month_of then
            reset = month_start(first + 1) - sa
        else
            reset = (first + nb) * bucket - sa
        end
    end
    local ok = count + cost <= lim
    local newest_count, older  -- what a commit leaves (nil: no commit)
    if (ok and not soon) or always then
        if not newest_live then
            newest_count, older = cost, src or ''
        elseif tot == '' then  -- the newest is the only bucket: count is its count
            newest_count, older = count + cost, ''
        else
            newest_count = nw + cost
            if moved then
                older = string.sub(src, q)
            end
        end
    end
    local total = newest_count and count + cost
    if ok then
        if soon then
            return true, remaining, reset, 0, total, newest_count, first, older, read
        end
        if not first and cost > 0 then
            if month_of then
                reset = month_start(cur + 1) - sa
            else
                reset = (cur + nb) * bucket - sa
            end
        end
        return true, remaining - cost, reset, 0, total, newest_count, first, older, read
    end

    -- Denied: drop live buckets oldest first until the request fits; it is admitted once
    -- the last dropped bucket has left the window. A cost above the limit never fits.
    local admit_at = at + hz
    if first then
        if not src then
            if tot == '' then
                src = ''
            else
                read = read_field(c, hash, id .. '|o')
                src = read
            end
            q = 1
        end
        local find, sub = string.find, string.sub
        local freed = 0
        local fits
        while true do
            local colon = find(src, ':', q, true)
            if not colon then
                break
            end
            local comma = find(src, ',', colon, true)
            freed = freed + sub(src, colon + 1, comma - 1)
            if count - freed + cost <= lim then
                fits = sub(src, q, colon - 1) + 0
                break
            end
            q = comma + 1
        end
        -- when the newest is cur, it is not in src
        if not fits and newest_live and count - (freed + nw) + cost <= lim then
            fits = cur
        end
        if fits then
            if month_of then
                admit_at = month_start(fits + 1) - off
            else
                admit_at = (fits + nb) * bucket - off
            end
        end
    end
    return false, remaining, reset, admit_at, total, newest_count, first, older, read
end

-- The head of a bucket tier after a commit at `at` (see check_buckets): without an older
-- bucket in the form an older script reads too.
local function commit_buckets(at_s, total, newest, first, older)
    if older == '' or not first then
        return string.format('%s;|%d|', at_s, newest)
    end
    return string.format('%s;%d|%d/%d', at_s, total, newest, first)
end

-- gcra: one theoretical arrival time `tat` (stored as tat - last); a request of cost c is
-- admitted when max(tat, at) + c*T - tol <= at. Returns ok, remaining, reset, admit_at
-- and the tat a commit stores.
local function check_gcra(v, t_s, t, at, cost, soon, T, tol)
    local tat = at
    if v then
        local ls, d = string.match(v, '^(%d+);(%d+)')
        if ls then
            if ls == t_s then
                d = t + d
            else
                d = ls + d
            end
            if d > at then
                tat = d
            end
        end
    end
    local nxt = tat + cost * T
    local ok = nxt - at <= tol
    local debt = tat - at  -- how far the bucket is from full
    local admit_at = 0
    if not ok then
        admit_at = nxt - tol
    elseif not soon then
        debt = nxt - at
    end
    -- what remains of the tolerance, truncated toward zero like decide.cpp; one more unit
    -- comes back once the debt falls to tol - (remaining + 1) * T
    local left = tol - debt
    local remaining
    if left >= 0 then
        remaining = (left - left % T) / T
    else
        remaining = (left + -left % T) / T
    end
    local reset = 0
    if debt > 0 then
        reset = debt - tol + (remaining + 1) * T
    end
    return ok, remaining, reset, admit_at, nxt
end

-- log: an entry counts while at < ts + per, so the live scores are (at - per, +inf).
-- Returns ok, remaining, reset, admit_at and the live count.
local function check_log(zset, at, cost, soon, lim, per, hz)
    local call = redis.call
    local lo = string.format('(%d', at - per)
    local count = call('ZCOUNT', zset, lo, '+inf')
    local ok = count + cost <= lim
    if ok and soon then
        cost = 0  -- the quota as it stands
    end
    local remaining = lim - count
    local admit_at = 0
    if ok then
        remaining = remaining - cost
    elseif cost > lim then
        admit_at = at + hz  -- never fits
    else
        admit_at = call('ZRANGEBYSCORE', zset, lo, '+inf', 'WITHSCORES', 'LIMIT', count + cost - lim - 1, 1)[2] + per
    end
    local reset = 0  -- until the oldest live entry leaves
    if count > 0 then
        reset = call('ZRANGEBYSCORE', zset, lo, '+inf', 'WITHSCORES', 'LIMIT', 0, 1)[2] + per - at
    elseif cost > 0 then
        reset = per
    end
    return ok, remaining, reset, admit_at, count
end

-- log: drop the entries that left the window at `drop` (normally `at`), add `cost` entries
-- at `at`, and keep the ZSET alive `hz` past `from` (as the HASH: see the commit below). v
-- is the tier's field before this commit, count the live entries its check saw. Returns the
-- tier's new field and the first sequence number used.
local function commit_log(zset, v, count, per, hz, at, at_s, from, cost, drop)
    local call, fmt = redis.call, string.format
    call('ZREMRANGEBYSCORE', zset, '-inf', fmt('%d', drop - per))
    local ls, e
    if v then
        ls, e = string.match(v, '^(%d+);(%d+)')
    end
    local seq = 0
    if cost > 0 then
        -- entries at `at` exist only if this tier last admitted at `at` (or its field is gone)
        if not ls or ls == at_s then
            seq = call('ZCOUNT', zset, at_s, at_s)
        end
        if cost == 1 then
            call('ZADD', zset, at_s, at_s .. ':' .. fmt('%d', seq + 1))
        else
            local zadd = {}
            for i = 1, cost do
                zadd[2 * i - 1] = at_s
                zadd[2 * i] = at_s .. ':' .. fmt('%d', seq + i)
            end
            call('ZADD', zset, unpack(zadd))
        end
    end
    -- without a live entry before, the ZSET is new (or gone): it has no TTL
    local exp = 0
    if count > 0 and e then
        exp = e + 0
    end
    if count > 0 or cost > 0 then
        local need = from + hz + 999
        need = (need - need % 1000) / 1000
        if exp < need then
            exp = need + (hz - hz % 8000) / 8000
            call('PEXPIREAT', zset, exp)
        end
    end
    return fmt('%s;%d', at_s, exp), seq + 1
end

-- concurrency: a lease counts while at < its expiry. With lease '0' (a charge, not a
-- request) nothing is checked. Returns ok, remaining and the live leases as stored.
local function check_concurrency(v, at, lim, lease)
    local live, kept, from = 0, nil, 1  -- kept: the live stretches before a lapsed lease
    local body = v and string.match(v, '^%d+;(.*)$')
    if body then
        for p, exp, q in string.gmatch(body, '()%d+:(%d+),()') do
            if exp + 0 > at then
                live = live + 1
            else
                kept = kept or {}
                kept[#kept + 1] = string.sub(body, from, p - 1)
                from = q
            end
        end
    end
    local ok = lease == '0' or live < lim
    local remaining = lim - live
    if ok and lease ~= '0' then
        remaining = remaining - 1
    end
    if not kept then
        return ok, remaining, body or ''
    end
    kept[#kept + 1] = string.sub(body, from)
    return ok, remaining, table.concat(kept)
end

local call, fmt, match = redis.call, string.format, string.match
local ARGV, KEYS = ARGV, KEYS
local ERR = 'ERR sluice rate_limit: '

-- Undo ---------------------------------------------------------------------------------
-- ARGV[2] == 'undo': take back one identifier's commit (Redis Cluster, when another node
-- denied the same request). KEYS: its HASH, then its log ZSETs in tier order. ARGV: '',
-- 'undo', cost, "@t" before and after the commit, then per field the commit wrote (its tiers'
-- in tier order, then older-bucket fields): field, value before ('' = none), value the commit
-- wrote, first log sequence number ('' = not a log tier). A field
-- goes back only if it still holds what the commit wrote (no admission since), and a log
-- tier's entries (by member) with it; "@t" only if every field did. Returns how many
-- fields went back.

if ARGV[2] == 'undo' then
    local hash, cost = KEYS[1], tonumber(ARGV[3])
    local restored, fields, z = 0, 0, 2
    local back_heads = {}  -- the tier fields put back (the record lists them first)
    for i = 6, #ARGV, 4 do
        local f, old, new, seq = ARGV[i], ARGV[i + 1], ARGV[i + 2], ARGV[i + 3]
        fields = fields + 1
        local back = call('HGET', hash, f) == new
        -- Older buckets go back with their head only: after a later admission in the same
        -- bucket (the head changed, the older field not), the pair must stay as it is.
        local head = match(f, '^(.*)|o$')
        if head and not back_heads[head] then
            back = false
        end
        if back then
            back_heads[f] = true
            restored = restored + 1
            if old == '' then
                call('HDEL', hash, f)
            else
                call('HSET', hash, f, old)
            end
        end
        if seq ~= '' then
            -- only with its field: later entries at the same time number on from these
            if back then
                local at_s = match(new, '^%d+')
                for q = tonumber(seq), tonumber(seq) + cost - 1 do
                    call('ZREM', KEYS[z], at_s .. ':' .. fmt('%d', q))
                end
            end
            z = z + 1
        end
    end
    if restored == fields and call('HGET', hash, '@t') == ARGV[5] then
        if ARGV[4] == '' then
            call('HDEL', hash, '@t')
        else
            call('HSET', hash, '@t', ARGV[4])
        end
    end
    return restored
end

-- Leases -------------------------------------------------------------------------------
-- ARGV[2] == 'release' or 'renew': the concurrency slots of lease ARGV[3] (a request that
-- ended, or runs on). KEYS: the identifiers' HASHes. ARGV: time override, the mode, the lease
-- id, then per identifier its number of concurrency tiers n and n times: tier id, lease_us.
-- A release drops the lease's entries; a renewal sets their expiry to max(time, "@t") +
-- lease_us, but an entry that lapsed stays lapsed (its slot may be another's now), and keeps
-- the HASH alive as long. Returns how many fields changed.

if ARGV[2] == 'release' or ARGV[2] == 'renew' then
    local renew, lease = ARGV[2] == 'renew', ARGV[3]
    local tm = call('TIME')
    local clock = tm[1] * 1000000 + tm[2]
    local now = clock
    if ARGV[1] ~= '' then
        now = tonumber(ARGV[1])
    end
    local changed, a = 0, 4
    for k = 1, #KEYS do
        local hash, n = KEYS[k], tonumber(ARGV[a])
        if not now or not n or not ARGV[a + 2 * n] then
            return redis.error_reply(ERR .. 'bad lease arguments')
        end
        a = a + 1
        local at = now
        local t = tonumber(call('HGET', hash, '@t'))
        if t and t > at then
            at = t
        end
        local keep = 0  -- how long the HASH must live (µs of Unix time)
        for _ = 1, n do
            local f, len = ARGV[a], tonumber(ARGV[a + 1])
            a = a + 2
            local v = call('HGET', hash, f)
            local head, body
            if v then
                head, body = match(v, '^(%d+;)(.*)$')
            end
            if body then
                local out, hit = {}, false
                for id, exp in string.gmatch(body, '(%d+):(%d+),') do
                    if id ~= lease or (renew and exp + 0 <= at) then
                        out[#out + 1] = id .. ':' .. exp .. ','  -- kept as it is (a lapsed one too)
                    else
                        hit = true
                        if renew then
                            out[#out + 1] = fmt('%s:%d,', id, at + len)
                            local from = at
                            if clock > from then
                                from = clock
                            end
                            if from + len > keep then
                                keep = from + len
                            end
                        end
                    end
                end
                if hit then
                    changed = changed + 1
                    call('HSET', hash, f, head .. table.concat(out))
                end
            end
        end
        if keep > 0 then
            keep = (keep + 999 - (keep + 999) % 1000) / 1000
            local e = call('HGET', hash, '@e')
            if not e or e + 0 < keep then
                call('HSET', hash, '@e', fmt('%d', keep))
                call('PEXPIREAT', hash, keep)
            end
        end
    end
    if a - 1 ~= #ARGV then
        return redis.error_reply(ERR .. 'argument count mismatch')
    end
    return changed
end

-- Parse ARGV -----------------------------------------------------------------------------
-- A last ARGV of a single letter is a flag (tier ids hold a '/', so none is mistaken):
--   'u' (one identifier only) asks for the undo record of the commit, after the decision:
--       "@t" before and after, then per field written its name, value before and after and
--       its first log sequence number (all strings, '' for none): the undo's arguments;
--   'p' (a policy's count_rejected): a denied request is committed too, and the reply is
--       the same request checked again on what it left (decide.cpp's count_rejected);
--   'q' checks only: nothing is written.
-- Batch: with ARGV[2] == 'batch', ARGV[3] requests follow, each as flag ('-' for none, 'p'
-- or 'q'), cost, number of identifiers, identifiers; KEYS holds their keys in the same order.
-- A request laid out as the one before it (flag, cost, kinds of identifiers, tiers, lease) is
-- the single argument '~', its keys in KEYS as usual: its arguments are read where the last
-- request written out in full has them (many clients under one policy cost one layout). The
-- same with the same identifiers too is '=', with no KEYS (one client's burst). Each is decided
-- in turn, as its own call would be right after the one before it (but all at one reading of
-- TIME), and the reply is the list of their replies. A batch is for one node, and on a cluster
-- for one hash slot (single-identifier requests). Its layout (counts, flags, algorithms, the
-- divisors) is checked first: a batch laid out wrong is refused whole, nothing written. (A word
-- where a number goes still fails only where it is met: the store formats every number.)

-- Fields, in a batch: a HASH that more than one of its requests use is read once and written
-- once. known[hash] is true for such a HASH until it is read, then holds every field of it
-- the batch read or committed, as it now stands (false: none), so that a request reads the
-- commits of the ones before it without asking Redis; dirty[hash] the set of those committed,
-- written at the end (touched: those HASHes in the order first committed to). A HASH used
-- once (known[hash] false), or a single call's, is read and written directly: these tables
-- would cost it more than they save.
local known, dirty, touched
local batch, nreq, r0  -- r0: the ARGV index of the request's cost
if ARGV[2] == 'batch' then
    known, dirty, touched = {}, {}, {}
    nreq = tonumber(ARGV[3])
    if not nreq then
        return redis.error_reply(ERR .. 'bad batch size')
    end
    batch, r0 = {}, 5
    -- The batch's layout is checked before anything is written, so that one laid out wrong is
    -- refused whole (a request's commit cannot be taken back once the next one fails).
    local a, k = 4, 1
    local pk, pn  -- the KEYS index and count of the request before (nil: none yet)
    for _ = 1, nreq do
        local f = ARGV[a]
        if f == '=' or f == '~' then
            if not pk then
                return redis.error_reply(ERR .. 'a repeat with no request before it')
            end
            if f == '~' then
                pk, k = k, k + pn  -- its own keys, as many
            end
            -- (ZSETs marked too: never read from `known`)
            for x = pk, pk + pn - 1 do
                local h = KEYS[x]
                if h and f == '=' then
                    known[h] = true  -- used again
                elseif h then
                    known[h] = known[h] ~= nil
                end
            end
            a = a + 1
        elseif not (f == '-' or f == 'p' or f == 'q') then
            return redis.error_reply(ERR .. 'bad flag in a batch')
        end
        local ids = 0
        if f ~= '=' and f ~= '~' then
            pk, ids = k, tonumber(ARGV[a + 2])
            if not tonumber(ARGV[a + 1]) or not ids or ids < 0 or ids % 1 ~= 0 then
                return redis.error_reply(ERR .. 'bad cost or key count')
            end
            a = a + 3
        end
        for _ = 1, ids do
            local n = tonumber(ARGV[a])
            if not n or n < 0 or n % 1 ~= 0 or not ARGV[a + 11 * n] then
                return redis.error_reply(ERR .. 'bad tier count')
            end
            local h = KEYS[k]
            if h then
                known[h] = known[h] ~= nil
            end
            k = k + 1
            for j = 1, n do
                local t = a + 11 * j - 10  -- the tier's algorithm
                local algo = ARGV[t]
                if algo == 'l' then
                    k = k + 1
                elseif algo == 'f' or algo == 's' or algo == 'm' then
                    if not (tonumber(ARGV[t + 3]) and ARGV[t + 3] + 0 > 0) then
                        return redis.error_reply(ERR .. 'bad bucket')
                    end
                elseif algo == 'g' then
                    if not (tonumber(ARGV[t + 6]) and ARGV[t + 6] + 0 > 0) then
                        return redis.error_reply(ERR .. 'bad interval')
                    end
                elseif algo ~= 'c' then
                    return redis.error_reply(ERR .. 'bad algorithm')
                end
            end
            a = a + 11 * n + 1
        end
        if f ~= '=' and f ~= '~' then
            pn = k - pk
        end
    end
    if a - 1 ~= #ARGV or k - 1 ~= #KEYS then
        return redis.error_reply(ERR .. 'argument count mismatch')
    end
else
    nreq, r0 = 1, 2
end
local record, always, query, flagged
local olds, xrec
local cost, nkeys

local tm = call('TIME')
local clock = tm[1] * 1000000 + tm[2]
local now = clock
if ARGV[1] ~= '' then
    now = tonumber(ARGV[1])
    if not now then
        return redis.error_reply(ERR .. 'bad time override')
    end
end

-- Check every tier of every identifier ----------------------------------------------------

-- Pass 1 decides, and commits if the request is admitted (or always, under count_rejected).
-- Pass 2 runs only for a request counted though refused: the same checks on what it left.
local allowed, retry_after, out, o
local a, k  -- the ARGV index of the next tier count, the next KEYS index
local k0 = 1  -- the request's first KEYS index
-- what an identifier's commit needs: the last one's here, and with several, each one's in
-- `pending` (one table per call is spared in the common case of one identifier)
local hash, at, at_s, e_s, horizon, n, has_log, has_lease, vals, a0, extra
local pending
local p0, pk0  -- the r0 of the last request written out in full, the k0 of the one before (a
-- repeat reads them)
-- Made by the first month tier of a call only: a function of this chunk is built anew on
-- every call, whether used or not.
local month_of, month_start
for req = 1, nreq do
    -- after '=' or '~': where the next request's flag follows (its keys: from k on, where
    -- this one's end; an '=' rereads the keys just before k0)
    local flag, next_r0
    if batch then
        flag = ARGV[r0 - 1]  -- (checked above)
        if flag == '=' then
            next_r0, r0, k0 = r0 + 1, p0, pk0
            flag = ARGV[r0 - 1]
        elseif flag == '~' then
            next_r0, pk0, r0 = r0 + 1, k0, p0  -- its own keys, from k0 on
            flag = ARGV[r0 - 1]
        else
            p0, pk0 = r0, k0
        end
    else
        flag = ARGV[#ARGV]
    end
    record, always, query = flag == 'u', flag == 'p', flag == 'q'
    flagged = record or always or query
    cost = ARGV[r0]
    if cost == '1' then
        cost = 1
    else
        cost = tonumber(cost)
    end
    nkeys = ARGV[r0 + 1]
    if nkeys == '1' then
        nkeys = 1
    else
        nkeys = tonumber(nkeys)
    end
    if not cost or not nkeys then
        return redis.error_reply(ERR .. 'bad cost or key count')
    end

    for pass = 1, 2 do
        allowed, retry_after = 1, 0
        out = { 0, 0, nil, nil, nil, nil, nil, nil, nil, nil, nil }
        o = 2  -- the reply's last index written
        a, k = r0 + 2, k0
        if nkeys > 1 then
            pending = {}
        else
            pending = nil
        end
        for i = 1, nkeys do
            a0, n = a, ARGV[a]
            if n == '1' then
                n = 1
            elseif n == '2' then
                n = 2
            else
                n = tonumber(n)
            end
            hash = KEYS[k]
            if not n or not hash or not ARGV[a + 11 * n] then
                return redis.error_reply(ERR .. 'bad tier count')
            end
            k = k + 1
            -- "@t", "@e" and the tiers' fields: from `known` if the batch has seen them all
            local c = known and known[hash]
            vals = nil
            if c and c ~= true then
                vals = { c['@t'], c['@e'], nil, nil }  -- (sized for two tiers: no growing)
                for j = 1, n do
                    local v = c[ARGV[a + 11 * j]]
                    if v == nil then
                        vals = nil
                        break
                    end
                    vals[j + 2] = v
                end
            end
            if not vals then
                if n == 1 then
                    vals = call('HMGET', hash, '@t', '@e', ARGV[a + 11])
                elseif n == 2 then
                    vals = call('HMGET', hash, '@t', '@e', ARGV[a + 11], ARGV[a + 22])
                else
                    local fields = { '@t', '@e' }
                    for j = 1, n do
                        fields[j + 2] = ARGV[a + 11 * j]
                    end
                    vals = call('HMGET', hash, unpack(fields))
                end
                -- a field known is newer than the one stored (written later, at the end)
                if c == true then
                    c = { ['@t'] = vals[1], ['@e'] = vals[2] }
                    known[hash] = c
                elseif c then
                    vals[1], vals[2] = c['@t'], c['@e']
                end
                if c then
                    for j = 1, n do
                        local f = ARGV[a + 11 * j]
                        local v = c[f]
                        if v == nil then
                            c[f] = vals[j + 2]
                        else
                            vals[j + 2] = v
                        end
                    end
                end
            end
            -- the key's clock never goes back before its "@t"
            local t_s = vals[1]
            local t
            at, at_s = now, nil
            if t_s then
                t = t_s + 0
                if t >= at then
                    at, at_s = t, t_s
                end
            end
            if not at_s then
                at_s = fmt('%d', at)
            end
            e_s, horizon, has_log, has_lease, extra = vals[2], 0, false, false, nil
            if record then
                -- "@t", then per tier its field before and (j + n) its first log sequence number;
                -- xrec: field, before, after of each older-buckets field written
                olds, xrec = { vals[1] or '' }, {}
                for j = 3, n + 2 do
                    olds[j] = vals[j] or ''
                end
            end

            for j = 3, n + 2 do
                local algo = ARGV[a + 1]
                local hz = ARGV[a + 10] + 0
                if hz > horizon then
                    horizon = hz
                end
                local v = vals[j]
                -- check min_interval: `soon` until interval_ok_at, min_interval after the tier's
                -- last admission (its field's <last>, most often "@t")
                local mi = ARGV[a + 9]
                local soon, interval_ok_at = false, 0
                if v and mi ~= '0' then
                    mi = mi + 0
                    local last = match(v, '^%d+')
                    if last == t_s then
                        last = t
                    else
                        last = last + 0
                    end
                    soon = mi > 0 and at - last < mi
                    interval_ok_at = last + mi
                end

                local ok, remaining, reset, admit_at, value
                if algo == 'f' or algo == 's' or algo == 'm' then
                    local bucket = ARGV[a + 4] + 0
                    if not (bucket > 0) then
                        return redis.error_reply(ERR .. 'bad bucket')
                    end
                    local nb = ARGV[a + 5]
                    if nb == '1' then
                        nb = 1
                    else
                        nb = nb + 0
                    end
                    local off = 0
                    if algo ~= 's' then
                        off = ARGV[a + 6]
                        if off == '0' then
                            off = 0
                        else
                            off = off + 0
                        end
                    end
                    local mo, ms  -- a month tier's calendar
                    if algo == 'm' then
                        if not month_of then
                            -- Calendar months (proleptic Gregorian, UTC), from days since
                            -- 1970-01-01 by the civil-date arithmetic of Howard Hinnant's
                            -- public-domain algorithms (decide.cpp uses std::chrono; the
                            -- differential test compares the two): the month holding µs time s
                            -- as year * 12 + month - 1, and the µs time month index i starts.
                            -- Lua's doubles keep this exact for years 1700 to 2255 (checked
                            -- against a calendar); clock times are far inside.
                            month_of = function(s)
                                local z = (s - s % 86400000000) / 86400000000 + 719468
                                local era = (z - z % 146097) / 146097
                                local doe = z - era * 146097
                                local yoe = doe - (doe - doe % 1460) / 1460 + (doe - doe % 36524) / 36524
                                yoe = yoe - (doe - doe % 146096) / 146096
                                yoe = (yoe - yoe % 365) / 365
                                local doy = doe - (365 * yoe + (yoe - yoe % 4) / 4 - (yoe - yoe % 100) / 100)
                                local mp = 5 * doy + 2
                                mp = (mp - mp % 153) / 153  -- months since March
                                local y = yoe + era * 400
                                if mp >= 10 then
                                    -- January and February end the March-based year
                                    return (y + 1) * 12 + mp - 10
                                end
                                return y * 12 + mp + 2
                            end

                            month_start = function(i)
                                local m = i % 12  -- 0: January
                                local y = (i - m) / 12
                                local mp  -- months since March
                                if m >= 2 then
                                    mp = m - 2
                                else
                                    mp = m + 10
                                    y = y - 1
                                end
                                local era = (y - y % 400) / 400
                                local yoe = y - era * 400
                                local doy = 153 * mp + 2
                                doy = (doy - doy % 5) / 5
                                local doe = yoe * 365 + (yoe - yoe % 4) / 4 - (yoe - yoe % 100) / 100 + doy
                                return (era * 146097 + doe - 719468) * 86400000000
                            end
                        end
                        mo, ms = month_of, month_start
                    end
                    local id = ARGV[a + 11]
                    local total, newest, first, older, read
                    ok, remaining, reset, admit_at, total, newest, first, older, read =
                        check_buckets(v, c, hash, id, t_s, t, at, cost, soon, always, ARGV[a + 2] + 0, bucket, nb, hz,
                                      off, mo, ms)
                    if total then
                        value = commit_buckets(at_s, total, newest, first, older)
                        if older and older ~= '' then
                            -- the older buckets changed: their field is written with the head
                            local of = id .. '|o'
                            extra = extra or {}
                            extra[#extra + 1] = of
                            extra[#extra + 1] = older
                            if record then
                                xrec[#xrec + 1] = of
                                xrec[#xrec + 1] = read or read_field(c, hash, of)
                                xrec[#xrec + 1] = older
                            end
                        end
                    end
                elseif algo == 'g' then
                    local T = ARGV[a + 7] + 0
                    if not (T > 0) then
                        return redis.error_reply(ERR .. 'bad interval')
                    end
                    local tat
                    ok, remaining, reset, admit_at, tat = check_gcra(v, t_s, t, at, cost, soon, T, ARGV[a + 8] + 0)
                    if (ok and not soon) or always then
                        value = fmt('%s;%d', at_s, tat - at)  -- commit_gcra
                        if tat - at > horizon then
                            horizon = tat - at  -- counted past its tolerance: the state matters until tat
                        end
                    end
                elseif algo == 'l' then
                    local zset = KEYS[k]
                    if not zset then
                        return redis.error_reply(ERR .. 'missing log key')
                    end
                    k = k + 1
                    has_log = true
                    local per = ARGV[a + 3] + 0
                    local count
                    ok, remaining, reset, admit_at, count = check_log(zset, at, cost, soon, ARGV[a + 2] + 0, per, hz)
                    if (ok and not soon) or always then
                        value = { zset, v, count, per, hz }  -- for commit_log
                    end
                elseif algo == 'c' then
                    local kept
                    ok, remaining, kept = check_concurrency(v, at, ARGV[a + 2] + 0, ARGV[a + 6])
                    reset, admit_at = 0, 0  -- when a slot frees is unknown
                    has_lease = true
                    value = { kept }  -- the commit adds this request's lease if it is admitted
                else
                    return redis.error_reply(ERR .. 'bad algorithm')
                end
                if soon then
                    -- both constraints only loosen as time passes: the later instant meets both
                    if interval_ok_at > admit_at then
                        admit_at = interval_ok_at
                    end
                    ok = false
                end

                out[o + 1] = remaining
                out[o + 2] = reset + (at - now)
                if ok then
                    out[o + 3] = 1
                else
                    out[o + 3] = 0
                    allowed = 0
                    if admit_at - now > retry_after then
                        retry_after = admit_at - now
                    end
                end
                o = o + 3
                vals[j] = value
                a = a + 11
            end
            a = a + 1
            if pending then
                pending[i] = { hash, at, at_s, e_s, horizon, n, has_log, has_lease, vals, a0, extra }
            end
        end
        if record then
            if nkeys ~= 1 then
                return redis.error_reply(ERR .. 'an undo record is for one identifier')
            end
        end
        if flagged and not batch then
            a = a + 1
        end
        if not batch and (a - 1 ~= #ARGV or k - 1 ~= #KEYS) then
            return redis.error_reply(ERR .. 'argument count mismatch')
        end
        out[1] = allowed
        out[2] = retry_after
        if query or pass == 2 or (allowed == 0 and not always) then
            break  -- a denial writes nothing (but under count_rejected), a query never
        end

        -- Commit each identifier -------------------------------------------------------------------
        -- vals[j + 2] holds tier j's new field (a log tier: commit_log's arguments); a0 is the
        -- ARGV index of the identifier's tier count. Each key then lives `horizon` (its longest)
        -- past max(at, clock): its expiry (ms) only grows, and when it must, with horizon / 8 of
        -- slack, so that a busy key is not extended on every request; "@e" remembers it.

        for i = 1, nkeys do
            if pending then
                hash, at, at_s, e_s, horizon, n, has_log, has_lease, vals, a0, extra = unpack(pending[i])
            end
            if n > 0 then  -- a key without tiers is not written
                local from = at
                if clock > from then
                    from = clock
                end
                if has_log then
                    -- An undo puts "@t" back: entries still live at the key's old clock must stay.
                    local drop = at
                    if record then
                        drop = tonumber(olds[1]) or 0
                    end
                    for j = 3, n + 2 do
                        if ARGV[a0 + 11 * j - 32] == 'l' then
                            local c = vals[j]
                            local seq
                            vals[j], seq = commit_log(c[1], c[2], c[3], c[4], c[5], at, at_s, from, cost, drop)
                            if record then
                                olds[j + n] = fmt('%d', seq)
                            end
                        end
                    end
                end
                if has_lease then
                    -- tier j's ARGV: its algorithm at a0 + 11j - 32, per (the lease) at - 30, lease id at - 27
                    for j = 3, n + 2 do
                        if ARGV[a0 + 11 * j - 32] == 'c' then
                            local v, lease = fmt('%s;%s', at_s, vals[j][1]), ARGV[a0 + 11 * j - 27]
                            if allowed == 1 and lease ~= '0' then
                                v = v .. fmt('%s:%d,', lease, at + ARGV[a0 + 11 * j - 30])
                            end
                            vals[j] = v
                        end
                    end
                end
                local e  -- a new "@e" (nil: the TTL is long enough)
                local need = from + horizon + 999
                need = (need - need % 1000) / 1000
                if not e_s or e_s + 0 < need then
                    e = fmt('%d', need + (horizon - horizon % 8000) / 8000)
                end
                local c = known and known[hash]
                if c then
                    local w = dirty[hash]
                    if not w then
                        w = {}
                        dirty[hash] = w
                        touched[#touched + 1] = hash
                    end
                    c['@t'], w['@t'] = at_s, true
                    for j = 1, n do
                        local f = ARGV[a0 + 11 * j]
                        c[f], w[f] = vals[j + 2], true
                    end
                    if extra then
                        for x = 1, #extra, 2 do
                            c[extra[x]], w[extra[x]] = extra[x + 1], true
                        end
                    end
                    if e then
                        c['@e'], w['@e'] = e, true
                    end
                elseif not e and not extra and n == 1 then
                    call('HSET', hash, '@t', at_s, ARGV[a0 + 11], vals[3])
                elseif not e and not extra and n == 2 then
                    call('HSET', hash, '@t', at_s, ARGV[a0 + 11], vals[3], ARGV[a0 + 22], vals[4])
                else
                    local hset = { '@t', at_s }
                    for j = 1, n do
                        hset[2 * j + 1] = ARGV[a0 + 11 * j]
                        hset[2 * j + 2] = vals[j + 2]
                    end
                    if extra then
                        for x = 1, #extra do
                            hset[#hset + 1] = extra[x]
                        end
                    end
                    if e then
                        hset[#hset + 1] = '@e'
                        hset[#hset + 1] = e
                    end
                    call('HSET', hash, unpack(hset))
                    if e then
                        call('PEXPIREAT', hash, e)  -- after HSET, which may have made the HASH
                    end
                end
            end
        end
        if allowed == 1 then
            break
        end
        always = false  -- pass 2 only checks
    end
    if record and allowed == 1 then
        o = #out
        out[o + 1], out[o + 2] = olds[1], at_s
        o = o + 2
        for j = 3, n + 2 do
            out[o + 1], out[o + 2], out[o + 3], out[o + 4] = ARGV[a0 + 11 * (j - 2)], olds[j], vals[j], olds[j + n] or ''
            o = o + 4
        end
        for x = 1, #xrec, 3 do
            out[o + 1], out[o + 2], out[o + 3], out[o + 4] = xrec[x], xrec[x + 1], xrec[x + 2], ''
            o = o + 4
        end
    end
    if batch then
        batch[req] = out
        if next_r0 then
            r0, k0 = next_r0, k
        else
            r0, k0 = a + 1, k
        end
    end
end
if batch and (r0 - 2 ~= #ARGV or k0 - 1 ~= #KEYS) then
    return redis.error_reply(ERR .. 'argument count mismatch')
end

-- A batch writes what its commits left: one HSET per HASH (then its new expiry), however
-- many of its requests committed to it.
for x = 1, touched and #touched or 0 do
    local hash = touched[x]
    local c, w = known[hash], dirty[hash]
    local hset, h = {}, 0
    for f in pairs(w) do
        hset[h + 1], hset[h + 2] = f, c[f]
        h = h + 2
    end
    call('HSET', hash, unpack(hset))
    if w['@e'] then
        call('PEXPIREAT', hash, c['@e'])  -- after HSET, which may have made the HASH
    end
end
return batch or out
