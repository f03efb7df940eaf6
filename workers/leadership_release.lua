-- Release the lock only if we still hold it (compare-and-delete in one step).
-- KEYS[1] = the lock; ARGV[1] = this process's token.
if redis.call('GET', KEYS[1]) == ARGV[1] then
  return redis.call('DEL', KEYS[1])
end
return 0
