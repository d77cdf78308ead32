// The node's sandbox image and the tests' container program: a few lines of Go, standard library only,
// built static by tools/kube/build (no registry here, so no registry.k8s.io/pause).
module podsweeper.test/kube/pause

go 1.26.0
