# Training time per configuration. Redraw with `gnuplot table1_runtime.gp` in this folder.
if (!exists("out")) out = "table1_runtime.svg"
set terminal svg size 800,500 dynamic enhanced
set output out
set datafile missing "NaN"
set key noenhanced
set grid
set title "Training time per configuration (median; paper per stage)" noenhanced
set style data histograms
set style histogram clustered gap 1
set style fill solid 0.8 border -1
set logscale y
set ylabel "training time (s, log scale)"
set xtics noenhanced rotate by -30
set key top right
plot "table1_runtime.dat" using 2:xtic(1) title "ours (median)", \
    "" using 3 title "paper"
