"""Grades, shared by everything that gives or applies them: the feedback request serve, the studio and the feedback
client validate (`request`), the rules that turn a grade into rewards on a group and spread an episode's grade over
its calls (`rules`, applied by the streams and by the promotion gate), and the client that publishes grades
without serve (`client`, used by the studio and `rftbus feedback`)."""
