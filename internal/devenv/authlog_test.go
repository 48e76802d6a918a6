package devenv

import "testing"

// TestTheAuthenticationLogHidesNoOne: every complete line is an authentication; a line that is not
// one, or the broker's line saying the log is full, is an error rather than a shorter list, since the
// authentications after it could be anyone's; only a last line still being written waits.
func TestTheAuthenticationLogHidesNoOne(t *testing.T) {
	cases := []struct {
		name  string
		log   string
		users []string
		err   bool
	}{
		{"empty", "", nil, false},
		{"users in order", "{\"user\":\"a\"}\n{\"user\":\"retry-operator\"}\n", []string{"a", "retry-operator"}, false},
		{"a last line being written", "{\"user\":\"a\"}\n{\"user\":\"ret", []string{"a"}, false},
		{"a bad line before others", "{\"user\":\"a\"}\n{\"user\n{\"user\":\"retry-operator\"}\n", nil, true},
		{"a line that names no user", "{\"user\":\"a\"}\n{}\n{\"user\":\"retry-operator\"}\n", nil, true},
		{"full", "{\"user\":\"a\"}\n{\"user\":\"\",\"full\":true}\n", nil, true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			users, err := parseAuthLog("auth.log", []byte(tc.log))
			if (err != nil) != tc.err {
				t.Fatalf("error %v, want an error: %t", err, tc.err)
			}
			if len(users) != len(tc.users) {
				t.Fatalf("users %q, want %q", users, tc.users)
			}
			for i := range users {
				if users[i] != tc.users[i] {
					t.Fatalf("users %q, want %q", users, tc.users)
				}
			}
		})
	}
}
