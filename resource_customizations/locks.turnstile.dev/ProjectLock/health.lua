-- Argo CD health check for Turnstile's ProjectLock (locks.turnstile.dev/v1alpha1, one lock key,
-- managed by the controller). A lock is healthy whether it is held or free: the message says
-- which. It reads Progressing only until the controller has written its status
-- (status.observedGeneration behind metadata.generation), as kstatus does.
-- Only Lua's base and table libraries are used: what Argo CD loads by default.
local s, gen = obj.status, obj.metadata.generation
if s == nil or s.observedGeneration == nil or gen == nil or s.observedGeneration < gen then
  return {status = "Progressing", message = "Waiting for the Turnstile controller to report this lock"}
end
local msg = "not locked"
for _, c in ipairs(s.conditions or {}) do
  if c.type == "Locked" then msg = c.message end
end
if s.queueLength ~= nil and s.queueLength > 0 then
  msg = msg .. "; " .. s.queueLength .. " waiting"
end
return {status = "Healthy", message = msg}
