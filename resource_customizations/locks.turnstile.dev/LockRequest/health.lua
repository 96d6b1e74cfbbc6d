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
local hs = {}
if obj.status == nil or obj.status.observedGeneration == nil or obj.metadata.generation == nil
    or obj.status.observedGeneration < obj.metadata.generation then
  hs.status = "Progressing"
  hs.message = "Waiting for the Turnstile controller to decide this request"
  return hs
end
local conds = {}
if obj.status.conditions ~= nil then
  for _, c in ipairs(obj.status.conditions) do
    conds[c.type] = c
  end
end
local function is_true(t)
  return conds[t] ~= nil and conds[t].status == "True"
end
if is_true("Stalled") then
  hs.status = "Degraded"
  hs.message = conds["Stalled"].message
  return hs
end
if is_true("Reconciling") then
  hs.status = "Progressing"
  hs.message = conds["Reconciling"].message
  return hs
end
if is_true("Ready") then
  hs.status = "Healthy"
  hs.message = conds["Ready"].message
  return hs
end
hs.status = "Progressing"
hs.message = "Waiting for the Turnstile controller to decide this request"
if conds["Granted"] ~= nil then
  hs.message = conds["Granted"].message
end
return hs
