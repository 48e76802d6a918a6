-- Argo CD health of a DeadLetterQueue (retry.retryops.dev) from the conditions the operator writes.
-- States and reasons: docs/argocd.md. Tested by test/argocd with the cases of health_test.yaml.
-- A queue past one of its alert thresholds (condition Healthy False) is Degraded.
-- The checks every kind shares (deletion, no status, a generation not observed, Stalled and Ready)
-- are config/argocd/health_common.lua, put in place of the line below by argocd.HealthScript; the
-- whole script of each kind is in config/argocd/argocd-cm.yaml.
-- #include health_common.lua

return fromReady(function()
  local thresholds = condition("Healthy")
  if thresholds ~= nil and thresholds.status == "False" then
    return health("Degraded", thresholds.message)
  end
  return nil
end)
