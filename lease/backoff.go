package lease

import (
	"math/rand/v2"
	"time"
)

// backoff grows from 25ms to limit, jittered upwards so that waiters spread
// out without ever polling more often than once per limit.
func backoff(attempt int, limit time.Duration) time.Duration {
	d := limit
	if attempt < 16 {
		d = min(limit, 25*time.Millisecond<<attempt)
	}
	return d + time.Duration(rand.Int64N(int64(d/4)+1))
}
