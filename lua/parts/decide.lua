-- Part decide: modes check and batch, each request in turn (mirrors decide() in decide.cpp):
-- every tier of every identifier is checked (identifier.lua, tier.lua), then committed to each
-- (commit.lua) only if all admit, or always under count_rejected (flag 'p'). The parts are
-- spliced in at build time, where they run (once per identifier or tier).
-- In: layout.lua's known, dirty, touched, batch, nreq and r0. Out: `out`, the reply of a single
-- check, or batch[i], each request's.
local receipt, always, query, flagged
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
    receipt, always, query = flag == 'u' or flag == 'U', flag == 'p' or flag == 'U', flag == 'q'
    flagged = receipt or always or query
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
            -- #include identifier.lua
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

        for i = 1, nkeys do
            -- #include commit.lua
        end
        if allowed == 1 then
            break
        end
        always = false  -- pass 2 only checks
    end
    if receipt and allowed == 1 then
        -- the receipt: per identifier the instant its commit used
        o = #out
        if pending then
            for i = 1, nkeys do
                out[o + i] = pending[i][2]
            end
        else
            out[o + 1] = at
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
