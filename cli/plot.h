// The training picture: loss and loss scale over steps, drawn by gnuplot into a PNG.
#pragma once

#include <string>
#include <vector>

namespace ampgrad::cli {

// Writes `png` with the loss (left axis) and, when any scale is positive, the loss scale
// (right axis, log scale) against the step. Throws ag::Error if gnuplot is missing or fails.
void plot_training(const std::string& png, const std::vector<double>& loss, const std::vector<double>& scale,
                   const std::string& title);

}  // namespace ampgrad::cli
