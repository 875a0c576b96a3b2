package controllerruntime_test

import (
	"context"
	"log"
	"os"
	"time"

	"cloud.google.com/go/spanner"
	"github.com/google/uuid"
	ctrl "sigs.k8s.io/controller-runtime"

	"github.com/spannerlock/terraform-provider-spannerlock/kubernetes/resourcelock"
)

// A controller-runtime manager whose controllers run in one replica across
// all clusters: the manager's leader election uses the Spanner lock instead
// of a coordination.k8s.io Lease in its own cluster.
func Example_controllerRuntime() {
	ctx := ctrl.SetupSignalHandler()
	db, err := spanner.NewClient(context.Background(), "projects/P/instances/I/databases/D")
	if err != nil {
		log.Fatal(err)
	}
	defer db.Close()
	// Unique per process, restarts included.
	identity := os.Getenv("POD_NAME") + "_" + uuid.NewString()
	// The lock checks the manager's timings against the lease: RenewDeadline
	// plus RetryPeriod must stay below 90% of LeaseDuration.
	leaseDuration, renewDeadline, retryPeriod := 15*time.Second, 10*time.Second, 2*time.Second
	lock, err := resourcelock.New(db, "locks", "my-controller", identity,
		resourcelock.WithElectorTimings(leaseDuration, renewDeadline, retryPeriod))
	if err != nil {
		log.Fatal(err)
	}
	defer func() { _ = lock.Close() }()

	mgr, err := ctrl.NewManager(ctrl.GetConfigOrDie(), ctrl.Options{
		LeaderElection:                      true,
		LeaderElectionID:                    "my-controller",
		LeaderElectionResourceLockInterface: lock,
		LeaderElectionReleaseOnCancel:       true,
		LeaseDuration:                       &leaseDuration,
		RenewDeadline:                       &renewDeadline,
		RetryPeriod:                         &retryPeriod,
	})
	if err != nil {
		log.Fatal(err)
	}
	// Register controllers with mgr here, then:
	if err := mgr.Start(ctx); err != nil {
		log.Fatal(err)
	}
}
