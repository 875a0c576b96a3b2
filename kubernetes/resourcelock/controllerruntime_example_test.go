package resourcelock_test

import (
	"context"
	"log"
	"os"
	"time"

	"cloud.google.com/go/spanner"
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
	identity := os.Getenv("POD_NAME") + "_" + os.Getenv("CLUSTER")
	lock, err := resourcelock.New(db, "locks", "my-controller", identity)
	if err != nil {
		log.Fatal(err)
	}
	defer func() { _ = lock.Close() }()

	leaseDuration, renewDeadline, retryPeriod := 15*time.Second, 10*time.Second, 2*time.Second
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
