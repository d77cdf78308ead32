// Wrapper module: prometheus-operator's published module, for two of its CRDs (PodMonitor and
// PrometheusRule), which the realkube tier installs on the real API server before it applies
// deploy/monitoring. Nothing is built from it. Used only by tools/kube/build.
module podsweeper.test/kube/crds

go 1.26.0

require github.com/prometheus-operator/prometheus-operator v0.85.0
