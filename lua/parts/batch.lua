-- Part batch: the end of mode batch: the count of its arguments, then one HSET per HASH of
-- what its commits left in the batch's memory (see layout.lua, "Fields, in a batch").
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
