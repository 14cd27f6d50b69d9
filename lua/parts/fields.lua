-- Part fields: reading an identifier's HASH fields, also from what a batch already holds of
-- them (mirrors key_state::find in decide.cpp: the state a check reads).

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
