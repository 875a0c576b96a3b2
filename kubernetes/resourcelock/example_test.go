package resourcelock_test

import (
	"context"
	"log"
	"os"
	"time"

	"cloud.google.com/go/spanner"
	"github.com/google/uuid"
	"k8s.io/client-go/tools/leaderelection"

	"github.com/spannerlock/terraform-provider-spannerlock/kubernetes/resourcelock"
)

// One leader across clusters with client-go's elector: every replica, in
// whichever cluster, runs this with its own identity.
func ExampleNew() {
	ctx := context.Background()
	db, err := spanner.NewClient(ctx, "projects/P/instances/I/databases/D")
	if err != nil {
		log.Fatal(err)
	}
	defer db.Close()
	// Unique per process, restarts included.
	identity := os.Getenv("POD_NAME") + "_" + uuid.NewString()
	lock, err := resourcelock.New(db, "locks", "my-controller", identity,
		resourcelock.WithElectorTimings(15*time.Second, 10*time.Second, 2*time.Second))
	if err != nil {
		log.Fatal(err)
	}
	defer func() { _ = lock.Close() }()
	leaderelection.RunOrDie(ctx, leaderelection.LeaderElectionConfig{
		Lock:            lock,
		LeaseDuration:   15 * time.Second, // the lock's timings; also the lease's TTL in Spanner
		RenewDeadline:   10 * time.Second,
		RetryPeriod:     2 * time.Second,
		ReleaseOnCancel: true, // the next leader takes over at its next retry
		Callbacks: leaderelection.LeaderCallbacks{
			OnStartedLeading: func(ctx context.Context) {
				// The lease ends before a rival can take over: work under
				// its Context, and fence Spanner writes with its Guard.
				l := lock.Lease()
				log.Printf("leading with fencing token %d", l.Token())
				ctx, cancel := context.WithCancel(ctx)
				defer cancel()
				context.AfterFunc(l.Context(), cancel)
				<-ctx.Done()
			},
			OnStoppedLeading: func() { log.Print("stopped leading") },
		},
	})
}
