-- Argo CD health of a ConsumerPipeline (retry.retryops.dev) from the conditions the operator writes.
-- States and reasons: docs/argocd.md. Tested by test/argocd with the cases of health_test.yaml.
-- An autoscaled pipeline idle at zero pods is Healthy, as a KEDA ScaledObject at zero is.
-- The checks every kind shares (deletion, no status, a generation not observed, Stalled and Ready)
-- are config/argocd/health_common.lua, put in place of the line below by argocd.HealthScript; the
-- whole script of each kind is in config/argocd/argocd-cm.yaml.
-- #include health_common.lua

return fromReady(function()
  if type(status.autoscaling) == "table" and status.autoscaling.state == "Idle" then
    return health("Healthy", "Idle: " .. text(status.autoscaling.message or ready.message))
  end
  return nil
end)
