package emulator

import "sync"

// logTail keeps the last bytes the emulator wrote, so a failed start can say
// why without anyone having to capture its output up front.
type logTail struct {
	mu   sync.Mutex
	buf  []byte
	size int
}

func newLogTail(size int) *logTail { return &logTail{size: size} }

func (l *logTail) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.buf = append(l.buf, p...)
	if over := len(l.buf) - l.size; over > 0 {
		l.buf = append(l.buf[:0], l.buf[over:]...)
	}
	return len(p), nil
}

func (l *logTail) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return string(l.buf)
}
