module example.com/kaltest

go 1.26.0
