-- The part of every kind's health check that is the same (argocd.HealthScript puts it where a
-- kind's health.lua says "-- #include health_common.lua"): reading the object defensively, deletion,
-- no status yet, a generation not yet observed; then fromReady, the verdict from Stalled and Ready,
-- which a kind calls with what Ready True means for it (nil: Healthy).

-- Messages longer than this are cut. Argo CD's argocd-cm sandbox has no string library unless
-- useOpenLibs is set; there the message stays whole (the operator bounds it to 1024 bytes).
local maxMessage = 512

-- The object is read defensively: a value of an unexpected type (a status written by another
-- tool, a number as a string) gives a health status, never a script error, which Argo CD would show
-- in place of the object's health.
local function text(v)
  if v == nil then
    return ""
  end
  return tostring(v)
end

local function bounded(msg)
  msg = text(msg)
  if string == nil or #msg <= maxMessage then
    return msg
  end
  local cut = maxMessage
  -- Never end inside a UTF-8 sequence: back off over continuation bytes.
  while cut > 0 and string.byte(msg, cut + 1) ~= nil and string.byte(msg, cut + 1) >= 128 and string.byte(msg, cut + 1) < 192 do
    cut = cut - 1
  end
  return string.sub(msg, 1, cut) .. "..."
end

local function health(status, message)
  return {status = status, message = bounded(message)}
end

local metadata = obj.metadata
if type(metadata) ~= "table" then
  metadata = {}
end
local status = obj.status
if type(status) ~= "table" then
  status = {}
end

local function condition(conditionType)
  if type(status.conditions) ~= "table" then
    return nil
  end
  for _, c in ipairs(status.conditions) do
    if type(c) == "table" and c.type == conditionType then
      return c
    end
  end
  return nil
end

-- Ready False with one of these reasons waits for something that comes by itself (a rollout, a
-- topic, a referenced object, another action, a sink probed after its circuit opened); any other
-- reason needs a look.
local inProgress = {
  Reconciling = true, Deleting = true, Progressing = true, Scaling = true,
  WaitingForReferences = true, WaitingForTopics = true, SourceTopicMissing = true,
  ReferenceNotFound = true, WaitingForAction = true, Running = true, RunInterrupted = true,
  CircuitHalfOpen = true,
}

if metadata.deletionTimestamp ~= nil then
  local ready = condition("Ready")
  if ready ~= nil and ready.reason == "Deleting" then
    return health("Progressing", ready.message)
  end
  local msg = "Pending deletion"
  if type(metadata.finalizers) == "table" and #metadata.finalizers > 0 then
    local names = {}
    for _, f in ipairs(metadata.finalizers) do
      table.insert(names, text(f))
    end
    msg = msg .. "; blocked by finalizers: " .. table.concat(names, ", ")
  end
  return health("Progressing", msg)
end

local generation = tonumber(metadata.generation)
local function behind(observed)
  observed = tonumber(observed)
  return generation ~= nil and (observed == nil or observed < generation)
end

if type(status.conditions) ~= "table" or #status.conditions == 0 then
  return health("Progressing", "Waiting for the operator to reconcile the " .. text(obj.kind))
end
local ready = condition("Ready")
if ready == nil then
  return health("Progressing", "Waiting for the Ready condition of the " .. text(obj.kind))
end
if behind(status.observedGeneration) or behind(ready.observedGeneration) then
  return health("Progressing", "Waiting for the operator to observe generation " .. tostring(generation))
end

-- fromReady is the verdict from the Stalled and Ready conditions; onTrue, when given, may give
-- another verdict than Healthy while Ready is True (nil from it: Healthy).
local function fromReady(onTrue)
  local stalled = condition("Stalled")
  if stalled ~= nil and stalled.status == "True" then
    return health("Degraded", stalled.message)
  end
  if ready.status == "True" then
    local h = nil
    if onTrue ~= nil then
      h = onTrue()
    end
    return h or health("Healthy", ready.message)
  end
  if ready.status == "False" and not inProgress[ready.reason] then
    return health("Degraded", ready.message)
  end
  return health("Progressing", ready.message)
end
