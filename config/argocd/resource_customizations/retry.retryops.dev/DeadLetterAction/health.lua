-- Argo CD health of a DeadLetterAction (retry.retryops.dev) from the conditions the operator writes.
-- States and reasons: docs/argocd.md. Tested by test/argocd with the cases of health_test.yaml.
-- The checks every kind shares (deletion, no status, a generation not observed, Stalled and Ready)
-- are config/argocd/health_common.lua, put in place of the line below by argocd.HealthScript; the
-- whole script of each kind is in config/argocd/argocd-cm.yaml.
-- #include health_common.lua

-- A one-shot action: Healthy once it succeeded, Degraded once it failed (it never runs again);
-- running (Ready True or not), it is Progressing.
if status.phase == "Succeeded" then
  return health("Healthy", ready.message)
end
if status.phase == "Failed" then
  return health("Degraded", ready.message)
end
return fromReady(function()
  return health("Progressing", ready.message)
end)
