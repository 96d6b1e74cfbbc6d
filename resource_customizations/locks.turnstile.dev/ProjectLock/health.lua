-- Argo CD health check for Turnstile's ProjectLock (locks.turnstile.dev/v1alpha1, one lock key,
-- managed by the controller). A lock is healthy whether it is held or free: the message says
-- which. It reads Progressing only until the controller has written its status
-- (status.observedGeneration behind metadata.generation), as kstatus does.
-- Only Lua's base and table libraries are used: what Argo CD loads by default.
local hs = {}
if obj.status == nil or obj.status.observedGeneration == nil or obj.metadata.generation == nil
    or obj.status.observedGeneration < obj.metadata.generation then
  hs.status = "Progressing"
  hs.message = "Waiting for the Turnstile controller to report this lock"
  return hs
end
hs.status = "Healthy"
hs.message = "not locked"
if obj.status.conditions ~= nil then
  for _, c in ipairs(obj.status.conditions) do
    if c.type == "Locked" then
      hs.message = c.message
    end
  end
end
if obj.status.queueLength ~= nil and obj.status.queueLength > 0 then
  hs.message = hs.message .. "; " .. obj.status.queueLength .. " waiting"
end
return hs
