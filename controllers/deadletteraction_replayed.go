package controllers

import "github.com/retryops/retry-operator/internal/kafka"

// replayFactory is the factory a dead-letter action's run writes through.
func (k *kafkaAccess) replayFactory(f kafka.ClientFactory) kafka.ClientFactory { return f }
