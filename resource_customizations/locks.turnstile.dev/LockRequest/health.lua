-- Argo CD health check for Turnstile's LockRequest (locks.turnstile.dev/v1alpha1).
-- It reads the conditions the way kstatus does, so Argo CD, Flux and kpt agree:
--   not yet decided by the controller (status.observedGeneration behind metadata.generation)
--                                           -> Progressing
--   Stalled=True: failed (Timeout, Busy, CommandLocked, Deadlock, QueueFull, Invalid) or the
--   grant ended without its owner asking (Expired, ForceUnlocked, HolderLost)
--                                           -> Degraded
--   Reconciling=True: waiting in a queue    -> Progressing
--   Ready=True: granted, or released by its owner
--                                           -> Healthy
-- Only Lua's base and table libraries are used: what Argo CD loads by default.
-- The first of these conditions that is True decides, as for kstatus.
local s, gen = obj.status, obj.metadata.generation
local cond = {} -- by type; left empty until the controller has decided this generation
if s ~= nil and s.observedGeneration ~= nil and gen ~= nil and s.observedGeneration >= gen then
  for _, c in ipairs(s.conditions or {}) do cond[c.type] = c end
end
-- The first of these conditions that is True decides, as for kstatus.
for _, rule in ipairs({{"Stalled", "Degraded"}, {"Reconciling", "Progressing"}, {"Ready", "Healthy"}}) do
  local c = cond[rule[1]]
  if c ~= nil and c.status == "True" then
    return {status = rule[2], message = c.message}
  end
end
if cond.Granted ~= nil then
  return {status = "Progressing", message = cond.Granted.message}
end
return {status = "Progressing", message = "Waiting for the Turnstile controller to decide this request"}
