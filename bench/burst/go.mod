module kmp/bench/burst

go 1.26
