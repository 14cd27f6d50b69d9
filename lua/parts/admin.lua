-- Part admin: modes reset and control, the admin API's (app/controls.cpp). Spliced into
-- rate_limit.lua at build time as the body of its modes; limit::decide() has no counterpart.
--
-- ARGV[2] == 'reset': one identifier's tiers forgotten (DELETE /identities/<kind>/<value>).
--   KEYS: its HASH, then the ZSETs of its log tiers. ARGV: time override (unused), the mode,
--   then the tier ids. Each tier's fields (<id>, <id>|o and <id>|m) go, and the ZSETs; "@t"
--   stays (the key's clock never goes back). Returns how many fields and keys went.
--
-- ARGV[2] == 'control': the blocks and overrides every gateway applies, one HASH (KEYS[1])
--   of entries and "@v", a version every change bumps. ARGV[3] is the operation:
--   'read' v    {version} when it is still v, else {version, '*', field, value, ...}: every entry
--   'set' f x.. the fields set to the values (pairs), the version bumped; returns {version}
--   'del' f..   the fields removed, the version bumped if any was there; returns {version}
--   'prune' f x.. each field removed that still holds its value (an entry that expired and
--               that no one has set again since); the version bumped if any was; {version}
--   'touch'     the version bumped (a reset: gateways drop their deny caches); {version}

if ARGV[2] == 'reset' then
    local hash, n = KEYS[1], 0
    for a = 3, #ARGV do
        local id = ARGV[a]
        n = n + call('HDEL', hash, id, id .. '|o', id .. '|m')
    end
    for k = 2, #KEYS do
        n = n + call('DEL', KEYS[k])
    end
    return n
end

if ARGV[2] == 'control' then
    local hash, op = KEYS[1], ARGV[3]
    local version = tonumber(call('HGET', hash, '@v') or '0')
    if op == 'read' then
        if ARGV[4] == tostring(version) then
            return { version }
        end
        local all, out = call('HGETALL', hash), { version, '*' }
        for i = 1, #all, 2 do
            if all[i] ~= '@v' then
                out[#out + 1] = all[i]
                out[#out + 1] = all[i + 1]
            end
        end
        return out
    end
    local changed = false
    if op == 'set' then
        if #ARGV < 5 or #ARGV % 2 ~= 1 then
            return redis.error_reply(ERR .. 'control set takes field, value pairs')
        end
        for a = 4, #ARGV, 2 do
            call('HSET', hash, ARGV[a], ARGV[a + 1])
        end
        changed = true
    elseif op == 'del' then
        for a = 4, #ARGV do
            changed = call('HDEL', hash, ARGV[a]) > 0 or changed
        end
    elseif op == 'prune' then
        if #ARGV % 2 ~= 1 then
            return redis.error_reply(ERR .. 'control prune takes field, value pairs')
        end
        for a = 4, #ARGV, 2 do
            if call('HGET', hash, ARGV[a]) == ARGV[a + 1] then
                call('HDEL', hash, ARGV[a])
                changed = true
            end
        end
    elseif op == 'touch' then
        changed = true
    else
        return redis.error_reply(ERR .. 'unknown control operation')
    end
    if changed then
        version = call('HINCRBY', hash, '@v', 1)
    end
    return { version }
end
