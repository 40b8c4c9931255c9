"""The course subject (docs/courses.md): a teacher's class under a license, its allowance, pool,
overlay, access windows and exam mode. Its own layers, top down: `admin` (the course page),
`manage` (/manage/v1/courses) > `form` (the course page's form), `policy_try` (the page's "try a
request" for a course) > `services` (every change to a course) > `usage` (teachers' per-student
usage), `selectors` (a course's cached rules for the hot path) > `rules` (the pure gate in time
and the overlay's checks: no ORM). The portal's course page reads live in licensing.portal.courses
(on the portal's own selectors); the overlay's algebra in licensing.rules.overlay."""
