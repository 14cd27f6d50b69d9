-- Part layout: decode a call's layout, a single check or a batch (redis_script.cpp's build_call
-- and build_batch write it; decide.cpp has no counterpart). Mode batch's checks of its layout,
-- before anything is written; a single check's layout is checked in decide.lua, before its
-- commit. Sets known, dirty, touched, batch (nil: a single check), nreq and r0.
-- A last ARGV of a single letter is a flag (tier ids hold a '/', so none is mistaken):
--   'u' asks for the receipt of an admission, after the decision: per identifier the instant
--       its commit used (as an integer), what mode undo takes it back with;
--   'p' (a policy's count_rejected): a denied request is committed too, and the reply is
--       the same request checked again on what it left (decide.cpp's count_rejected);
--   'U' both 'u' and 'p';
--   'q' checks only: nothing is written.
-- Batch: with ARGV[2] == 'batch', ARGV[3] requests follow, each as flag ('-' for none, 'p',
-- 'u', 'U' or 'q'), cost, number of identifiers, identifiers; KEYS holds their keys in the same
-- order.
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
        elseif not (f == '-' or f == 'p' or f == 'q' or f == 'u' or f == 'U') then
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
            local tn = a
            -- #include tier_layout.lua
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
