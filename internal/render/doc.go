// Package render turns a ConsumerPipeline, its RetryPolicy and its DeadLetterQueue into the child
// objects the operator applies: the dispatcher ConfigMap ([ConfigMap]), the consumer Deployment
// ([Deployment]) and the alert rules ([AlertRules], as a PrometheusRule or a ConfigMap), and a
// DeadLetterQueue into its own alert rules ([DeadLetterQueueAlertRules]); besides, a pipeline's
// consumers' access to their circuit report (access.go: ServiceAccount, ConfigMap, Role,
// RoleBinding) and its autoscaler (a HorizontalPodAutoscaler on the external metric, or a KEDA
// [ScaledObject]). Everything here is pure: no client, no clock, no randomness, so every function is
// unit-tested without a cluster and its output is deterministic (maps are sorted when serialised,
// lists keep a fixed order). The outputs are golden-tested (testdata/), the alert rules also
// checked by promtool and against the exported metric names (internal/promcheck), and the rendered
// config read back as the data plane reads it (contract_test.go). A [RuleSet] carries a [RuleSet.Digest]
// of everything its two renderings are made of, so that a caller can skip rendering unchanged rules.
//
// # What the caller does
//
//   - Owner references: none are set here. The pipeline controller sets the ConsumerPipeline as the
//     controller owner of the ConfigMap, the Deployment and the pipeline's rules; the DeadLetterQueue
//     controller sets the DeadLetterQueue as the owner of its rules (a DLQ is shared by pipelines, so
//     its alerts live and die with it, not with any one pipeline).
//   - Apply: every object carries its apiVersion and kind, so it can be applied with server-side
//     apply (client.Apply, a fixed field owner such as "retry-operator", ForceOwnership). Only fields
//     the operator owns are set, so fields defaulted by the API server or set by others (an HPA's
//     replicas excepted) cause no fight.
//   - The config hash: apply the ConfigMap first, then pass [ConfigHash] of the rendered ConfigMap to
//     [Deployment]; the hash lands on the pod template, so a policy, DLQ or connection change rolls
//     the pods.
//   - The rules: when the PrometheusRule kind (monitoring.coreos.com/v1) is served, apply
//     [PrometheusRule]; otherwise apply [AlertConfigMap], which holds the same rule file.
//
// # Secrets
//
// Secrets are never read here. A connection's TLS and SASL Secrets are mounted into the pods as
// volumes and named in the config by file path (see [SecretsDir]); their names appear in the
// ConfigMap's [AnnotationSecrets] annotation, their values nowhere.
package render
