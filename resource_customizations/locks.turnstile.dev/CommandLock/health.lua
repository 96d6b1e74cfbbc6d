-- Argo CD health check for Turnstile's CommandLock (locks.turnstile.dev/v1alpha1, a freeze).
-- It reads the conditions the way kstatus does, so Argo CD, Flux and kpt agree:
--   not yet seen by the controller (status.observedGeneration behind metadata.generation)
--                                             -> Progressing
--   Reconciling=True: frozen, holders of the command still run (draining)
--                                             -> Progressing
--   Ready=True: frozen and Drained, or not frozen
--                                             -> Healthy
-- Only Lua's base and table libraries are used: what Argo CD loads by default.
local hs = {}
if obj.status == nil or obj.status.observedGeneration == nil or obj.metadata.generation == nil
    or obj.status.observedGeneration < obj.metadata.generation then
  hs.status = "Progressing"
  hs.message = "Waiting for the Turnstile controller to report this freeze"
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
if is_true("Reconciling") then
  hs.status = "Progressing"
  hs.message = conds["Reconciling"].message
  return hs
end
if is_true("Ready") then
  hs.status = "Healthy"
  hs.message = conds["Ready"].message
  if is_true("Locked") then
    hs.message = hs.message .. " (" .. conds["Locked"].message .. ")"
  end
  return hs
end
hs.status = "Progressing"
hs.message = "Waiting for the Turnstile controller to report this freeze"
return hs
