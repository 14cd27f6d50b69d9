-- Part undo: mode undo, a Redis Cluster's taking back of one identifier's commit (mirrors no
-- function of decide.cpp: one process never needs to undo). Spliced into rate_limit.lua at
-- build time as the body of its mode.
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
