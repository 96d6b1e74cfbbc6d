-- Argo CD health check for Turnstile's CommandLock (locks.turnstile.dev/v1alpha1, a freeze).
-- It reads the conditions the way kstatus does, so Argo CD, Flux and kpt agree:
--   not yet seen by the controller (status.observedGeneration behind metadata.generation)
--                                             -> Progressing
--   Reconciling=True: frozen, holders of the command still run (draining)
--                                             -> Progressing
--   Ready=True: frozen and Drained, or not frozen
--                                             -> Healthy
--   Stalled=True: a freeze window it cannot evaluate (it freezes its scope until fixed)
--                                             -> Degraded
-- Only Lua's base and table libraries are used: what Argo CD loads by default.
local s, gen = obj.status, obj.metadata.generation
local cond = {} -- by type; left empty until the controller has seen this generation
if s ~= nil and s.observedGeneration ~= nil and gen ~= nil and s.observedGeneration >= gen then
  for _, c in ipairs(s.conditions or {}) do cond[c.type] = c end
end
local function on(t) return cond[t] ~= nil and cond[t].status == "True" end
if on("Stalled") then
  return {status = "Degraded", message = cond.Stalled.message}
elseif on("Reconciling") then
  return {status = "Progressing", message = cond.Reconciling.message}
elseif on("Ready") and on("Locked") then
  return {status = "Healthy", message = cond.Ready.message .. " (" .. cond.Locked.message .. ")"}
elseif on("Ready") then
  return {status = "Healthy", message = cond.Ready.message}
end
return {status = "Progressing", message = "Waiting for the Turnstile controller to report this freeze"}
